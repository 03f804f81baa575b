//! Tensor payloads: raw bytes from `raw_data`, from the typed fields (`float_data`, `int32_data`, ...),
//! or from external-data side files, with the path and range rules ONNX requires.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;

use crate::error::OnnxError;
use crate::load::map_file;
use crate::proto::{tensor_proto, AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto};

/// A tensor payload: packed little-endian elements (the layout of `raw_data`; sub-byte types packed
/// as ONNX packs them), or one byte string per element for string tensors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TensorStorage {
    Raw(Bytes),
    Strings(Vec<Bytes>),
}

/// `TensorProto.DataType` codes this module needs by number.
mod code {
    pub const FLOAT: i32 = 1;
    pub const UINT16: i32 = 4;
    pub const INT16: i32 = 5;
    pub const INT32: i32 = 6;
    pub const INT64: i32 = 7;
    pub const STRING: i32 = 8;
    pub const FLOAT16: i32 = 10;
    pub const DOUBLE: i32 = 11;
    pub const UINT32: i32 = 12;
    pub const UINT64: i32 = 13;
    pub const COMPLEX64: i32 = 14;
    pub const COMPLEX128: i32 = 15;
    pub const BFLOAT16: i32 = 16;
    pub const FLOAT6E2M3: i32 = 27;
    pub const FLOAT6E3M2: i32 = 28;
}

/// Bits per element of an ONNX data type code; `None` for UNDEFINED, STRING and unknown codes.
pub fn element_bits(data_type: i32) -> Option<u32> {
    Some(match data_type {
        25 | 26 => 2,
        21..=23 => 4,
        27 | 28 => 6,
        2 | 3 | 9 | 17..=20 | 24 => 8,
        4 | 5 | 10 | 16 => 16,
        1 | 6 | 12 => 32,
        7 | 11 | 13 | 14 => 64,
        15 => 128,
        _ => return None,
    })
}

/// Element count of a tensor's dims; errors on negative dims or overflow.
pub fn tensor_numel(t: &TensorProto) -> Result<u64, OnnxError> {
    let mut n = 1u64;
    for &d in &t.dims {
        let d = u64::try_from(d)
            .map_err(|_| OnnxError::tensor(tensor_name(t), format!("negative dim {d}")))?;
        n = n.checked_mul(d).ok_or_else(|| {
            OnnxError::tensor(tensor_name(t), format!("dims {:?} overflow", t.dims))
        })?;
    }
    Ok(n)
}

/// Bytes the packed little-endian (`raw_data`) form of the tensor takes; `None` for string tensors.
pub fn expected_byte_len(t: &TensorProto) -> Result<Option<u64>, OnnxError> {
    let dt = t.data_type.unwrap_or(0);
    if dt == code::STRING {
        return Ok(None);
    }
    let bits = element_bits(dt).ok_or_else(|| {
        OnnxError::tensor(
            tensor_name(t),
            format!("unknown or undefined data_type {dt}"),
        )
    })?;
    let n = tensor_numel(t)?;
    let total_bits = n
        .checked_mul(bits as u64)
        .ok_or_else(|| OnnxError::tensor(tensor_name(t), format!("dims {:?} overflow", t.dims)))?;
    Ok(Some(total_bits.div_ceil(8)))
}

pub(crate) fn tensor_name(t: &TensorProto) -> &str {
    t.name.as_deref().unwrap_or("")
}

/// True when the tensor's payload lives in an external file (`data_location = EXTERNAL`).
pub fn is_external(t: &TensorProto) -> bool {
    t.data_location == Some(tensor_proto::DataLocation::External as i32)
}

/// A parsed `external_data` entry list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalRef {
    /// The `location` key, as written (relative to the model's directory).
    pub location: String,
    /// The `offset` key; 0 when absent.
    pub offset: u64,
    /// The `length` key; `None` when absent (the data run to the end of the file).
    pub length: Option<u64>,
}

/// Parses a tensor's `external_data` keys. Unknown keys (e.g. `checksum`) are ignored.
pub fn external_ref(t: &TensorProto) -> Result<ExternalRef, OnnxError> {
    let name = tensor_name(t);
    let mut location = None;
    let mut offset = None;
    let mut length = None;
    for kv in &t.external_data {
        let key = kv.key.as_deref().unwrap_or("");
        let value = kv.value.as_deref().unwrap_or("");
        match key {
            "location" => location = Some(value.to_string()),
            "offset" => offset = Some(value.to_string()),
            "length" => length = Some(value.to_string()),
            _ => {}
        }
    }
    let location = location.ok_or_else(|| {
        OnnxError::external(
            name,
            "",
            "data_location is EXTERNAL but there is no 'location' key",
        )
    })?;
    let parse = |key: &str, v: Option<String>| -> Result<Option<u64>, OnnxError> {
        match v {
            None => Ok(None),
            Some(s) => s.trim().parse::<u64>().map(Some).map_err(|_| {
                OnnxError::external(
                    name,
                    &location,
                    format!("'{key}' is '{s}', not a non-negative integer"),
                )
            }),
        }
    };
    let offset = parse("offset", offset)?.unwrap_or(0);
    let length = parse("length", length)?;
    Ok(ExternalRef {
        location,
        offset,
        length,
    })
}

/// Reads external-data payloads relative to one model directory, mapping each side file once.
///
/// Contract: a `location` must be a relative path that stays inside the model's directory, lexically
/// (no absolute path, no `..` above the directory) and after resolving symlinks. The returned bytes are
/// slices of the file mappings, not copies.
#[derive(Debug)]
pub struct ExternalDataReader {
    base_dir: Option<PathBuf>,
    /// Mapped side files keyed by their canonical path; a `BTreeMap` keeps any iteration deterministic.
    files: BTreeMap<PathBuf, Bytes>,
}

impl ExternalDataReader {
    /// A reader for a model stored in `base_dir`.
    pub fn new(base_dir: impl Into<PathBuf>) -> ExternalDataReader {
        ExternalDataReader {
            base_dir: Some(base_dir.into()),
            files: BTreeMap::new(),
        }
    }

    /// A reader for an in-memory model: every external reference is an error.
    pub fn none() -> ExternalDataReader {
        ExternalDataReader {
            base_dir: None,
            files: BTreeMap::new(),
        }
    }

    /// The path a location resolves to, after checking it stays in the model's directory.
    pub fn resolve_location(&self, tensor: &str, location: &str) -> Result<PathBuf, OnnxError> {
        let err = |reason: String| OnnxError::external(tensor, location, reason);
        let Some(base) = &self.base_dir else {
            return Err(err(
                "the model has no directory (built in memory), so external data cannot be read"
                    .into(),
            ));
        };
        if location.is_empty() {
            return Err(err("empty location".into()));
        }
        let rel = Path::new(location);
        let mut depth = 0usize;
        for c in rel.components() {
            match c {
                Component::Normal(_) => depth += 1,
                Component::CurDir => {}
                Component::ParentDir => {
                    depth = depth
                        .checked_sub(1)
                        .ok_or_else(|| err("'..' escapes the model's directory".into()))?;
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(err("absolute paths are not allowed; locations are relative to the model's directory".into()))
                }
            }
        }
        if depth == 0 {
            return Err(err(
                "location names the model's directory, not a file".into()
            ));
        }
        let full = base.join(rel);
        let canon = full
            .canonicalize()
            .map_err(|e| err(format!("cannot open {}: {e}", full.display())))?;
        let canon_base = base.canonicalize().map_err(|e| {
            err(format!(
                "cannot open model directory {}: {e}",
                base.display()
            ))
        })?;
        if !canon.starts_with(&canon_base) {
            return Err(err(format!(
                "{} resolves (through a symlink) to {}, outside the model's directory",
                full.display(),
                canon.display()
            )));
        }
        if !canon.is_file() {
            return Err(err(format!("{} is not a regular file", full.display())));
        }
        Ok(canon)
    }

    /// The external payload of `t` (which must have `data_location = EXTERNAL`), range-checked.
    pub fn read(&mut self, t: &TensorProto) -> Result<Bytes, OnnxError> {
        let name = tensor_name(t);
        let r = external_ref(t)?;
        let path = self.resolve_location(name, &r.location)?;
        let file = match self.files.get(&path) {
            Some(b) => b.clone(),
            None => {
                let b = map_file(&path)
                    .map_err(|e| OnnxError::external(name, &r.location, e.to_string()))?;
                self.files.insert(path.clone(), b.clone());
                b
            }
        };
        let size = file.len() as u64;
        if r.offset > size {
            return Err(OnnxError::external(
                name,
                &r.location,
                format!(
                    "offset {} is past the end of {} ({size} bytes)",
                    r.offset,
                    path.display()
                ),
            ));
        }
        let length = r.length.unwrap_or(size - r.offset);
        let end = r
            .offset
            .checked_add(length)
            .filter(|&e| e <= size)
            .ok_or_else(|| {
                OnnxError::external(
                    name,
                    &r.location,
                    format!(
                        "offset {} + length {length} exceeds {} ({size} bytes)",
                        r.offset,
                        path.display()
                    ),
                )
            })?;
        Ok(file.slice(r.offset as usize..end as usize))
    }
}

/// The payload of a tensor in its packed little-endian form (`TensorStorage::Raw`, the layout of
/// `raw_data`) or, for string tensors, one byte string per element.
///
/// Sources, in the order ONNX gives them precedence: external data (when `data_location = EXTERNAL`),
/// `raw_data` (when present), then the typed field for the data type (`float_data` for FLOAT/COMPLEX64,
/// `int32_data` for INT32 and every narrower type incl. FLOAT16/BFLOAT16/BOOL/float8 (bit patterns in the
/// low bits; 4-bit types two per entry, 2-bit types four per entry, 6-bit floats one per entry),
/// `int64_data`, `uint64_data` for UINT32/UINT64, `double_data` for DOUBLE/COMPLEX128, `string_data`).
///
/// Errors: segmented tensors, unknown types, a typed field that does not belong to the type, or a
/// length that disagrees with dims and type, each naming the tensor.
pub fn tensor_bytes(
    t: &TensorProto,
    ext: &mut ExternalDataReader,
) -> Result<TensorStorage, OnnxError> {
    let name = tensor_name(t);
    if t.segment.is_some() {
        return Err(OnnxError::tensor(
            name,
            "segmented tensors (TensorProto.segment) are not supported",
        ));
    }
    let dt = t.data_type.unwrap_or(0);
    let numel = tensor_numel(t)?;
    if dt == code::STRING {
        if is_external(t) || t.raw_data.is_some() {
            return Err(OnnxError::tensor(
                name,
                "string tensors must use string_data, not raw or external data",
            ));
        }
        check_only_field(t, Field::String)?;
        if t.string_data.len() as u64 != numel {
            return Err(OnnxError::tensor(
                name,
                format!(
                    "string_data has {} elements, dims {:?} need {numel}",
                    t.string_data.len(),
                    t.dims
                ),
            ));
        }
        return Ok(TensorStorage::Strings(t.string_data.clone()));
    }
    let expected = expected_byte_len(t)?.unwrap_or(0);
    let (raw, source) = if is_external(t) {
        (ext.read(t)?, "external data")
    } else if let Some(raw) = &t.raw_data {
        (raw.clone(), "raw_data")
    } else {
        (typed_to_raw(t, numel)?, "typed data")
    };
    if raw.len() as u64 != expected {
        return Err(OnnxError::tensor(
            name,
            format!(
                "{source} has {} bytes, data_type {dt} with dims {:?} needs {expected}",
                raw.len(),
                t.dims
            ),
        ));
    }
    Ok(TensorStorage::Raw(raw))
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Field {
    Float,
    Int32,
    String,
    Int64,
    Double,
    Uint64,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::Float => "float_data",
            Field::Int32 => "int32_data",
            Field::String => "string_data",
            Field::Int64 => "int64_data",
            Field::Double => "double_data",
            Field::Uint64 => "uint64_data",
        }
    }
}

fn field_len(t: &TensorProto, f: Field) -> usize {
    match f {
        Field::Float => t.float_data.len(),
        Field::Int32 => t.int32_data.len(),
        Field::String => t.string_data.len(),
        Field::Int64 => t.int64_data.len(),
        Field::Double => t.double_data.len(),
        Field::Uint64 => t.uint64_data.len(),
    }
}

/// Errors when a typed field other than `allowed` holds elements.
fn check_only_field(t: &TensorProto, allowed: Field) -> Result<(), OnnxError> {
    use Field::*;
    for f in [Float, Int32, String, Int64, Double, Uint64] {
        if f != allowed && field_len(t, f) > 0 {
            return Err(OnnxError::tensor(
                tensor_name(t),
                format!(
                    "{} holds {} elements but data_type {} stores its elements in {}",
                    f.name(),
                    field_len(t, f),
                    t.data_type.unwrap_or(0),
                    allowed.name()
                ),
            ));
        }
    }
    Ok(())
}

/// The typed field a data type uses, and how many entries `numel` elements take there.
fn typed_field(dt: i32, numel: u64) -> Option<(Field, u64)> {
    Some(match dt {
        code::FLOAT => (Field::Float, numel),
        code::COMPLEX64 => (Field::Float, numel.checked_mul(2)?),
        code::DOUBLE => (Field::Double, numel),
        code::COMPLEX128 => (Field::Double, numel.checked_mul(2)?),
        code::INT64 => (Field::Int64, numel),
        code::UINT32 | code::UINT64 => (Field::Uint64, numel),
        code::STRING => (Field::String, numel),
        21..=23 => (Field::Int32, numel.div_ceil(2)),
        25 | 26 => (Field::Int32, numel.div_ceil(4)),
        _ if element_bits(dt).is_some() => (Field::Int32, numel),
        _ => return None,
    })
}

fn typed_to_raw(t: &TensorProto, numel: u64) -> Result<Bytes, OnnxError> {
    let name = tensor_name(t);
    let dt = t.data_type.unwrap_or(0);
    let (field, entries) = typed_field(dt, numel)
        .ok_or_else(|| OnnxError::tensor(name, format!("unknown or undefined data_type {dt}")))?;
    check_only_field(t, field)?;
    let have = field_len(t, field) as u64;
    if have != entries {
        return Err(OnnxError::tensor(
            name,
            format!(
                "{} has {have} entries, data_type {dt} with dims {:?} needs {entries}",
                field.name(),
                t.dims
            ),
        ));
    }
    let mut out: Vec<u8> = Vec::new();
    match (field, dt) {
        (Field::Float, _) => t
            .float_data
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        (Field::Double, _) => t
            .double_data
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        (Field::Int64, _) => t
            .int64_data
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        (Field::Uint64, code::UINT32) => t
            .uint64_data
            .iter()
            .for_each(|&v| out.extend_from_slice(&(v as u32).to_le_bytes())),
        (Field::Uint64, _) => t
            .uint64_data
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        (Field::Int32, code::INT32) => t
            .int32_data
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        (Field::Int32, code::INT16 | code::UINT16 | code::FLOAT16 | code::BFLOAT16) => t
            .int32_data
            .iter()
            .for_each(|&v| out.extend_from_slice(&(v as u16).to_le_bytes())),
        (Field::Int32, code::FLOAT6E2M3 | code::FLOAT6E3M2) => out = pack_6bit(&t.int32_data),
        // 8-bit types, and 4-bit/2-bit types whose entries each hold one already-packed byte.
        (Field::Int32, _) => out.extend(t.int32_data.iter().map(|&v| v as u8)),
        (Field::String, _) => {
            return Err(OnnxError::tensor(
                name,
                "string tensors have no raw byte form",
            ));
        }
    }
    Ok(Bytes::from(out))
}

/// Packs 6-bit values (low 6 bits of each entry) into an LSB-first bitstream, 4 values per 3 bytes.
fn pack_6bit(values: &[i32]) -> Vec<u8> {
    let mut out = vec![0u8; (values.len() * 6).div_ceil(8)];
    for (i, &v) in values.iter().enumerate() {
        let bits = (v as u32 & 0x3f) as u16;
        let bit = i * 6;
        let (byte, shift) = (bit / 8, bit % 8);
        let w = bits << shift;
        out[byte] |= w as u8;
        if shift > 2 {
            out[byte + 1] |= (w >> 8) as u8;
        }
    }
    out
}

/// Calls `f` on every tensor of a graph, recursively through node attributes and subgraphs:
/// initializers, sparse initializers' values and indices, `t`/`tensors`/`sparse_tensor(s)` attributes.
pub fn for_each_tensor_mut<E>(
    g: &mut GraphProto,
    f: &mut impl FnMut(&mut TensorProto) -> Result<(), E>,
) -> Result<(), E> {
    for t in &mut g.initializer {
        f(t)?;
    }
    for s in &mut g.sparse_initializer {
        for t in [&mut s.values, &mut s.indices].into_iter().flatten() {
            f(t)?;
        }
    }
    for n in &mut g.node {
        for_each_node_tensor_mut(n, f)?;
    }
    Ok(())
}

fn for_each_node_tensor_mut<E>(
    n: &mut NodeProto,
    f: &mut impl FnMut(&mut TensorProto) -> Result<(), E>,
) -> Result<(), E> {
    for a in &mut n.attribute {
        for_each_attr_tensor_mut(a, f)?;
    }
    Ok(())
}

fn for_each_attr_tensor_mut<E>(
    a: &mut AttributeProto,
    f: &mut impl FnMut(&mut TensorProto) -> Result<(), E>,
) -> Result<(), E> {
    if let Some(t) = &mut a.t {
        f(t)?;
    }
    for t in &mut a.tensors {
        f(t)?;
    }
    for s in a
        .sparse_tensor
        .iter_mut()
        .chain(a.sparse_tensors.iter_mut())
    {
        for t in [&mut s.values, &mut s.indices].into_iter().flatten() {
            f(t)?;
        }
    }
    if let Some(g) = &mut a.g {
        for_each_tensor_mut(g, f)?;
    }
    for g in &mut a.graphs {
        for_each_tensor_mut(g, f)?;
    }
    Ok(())
}

/// Calls `f` on every tensor of a model: the main graph, local functions' nodes and training graphs.
pub fn for_each_model_tensor_mut<E>(
    m: &mut ModelProto,
    f: &mut impl FnMut(&mut TensorProto) -> Result<(), E>,
) -> Result<(), E> {
    if let Some(g) = &mut m.graph {
        for_each_tensor_mut(g, f)?;
    }
    for func in &mut m.functions {
        for n in &mut func.node {
            for_each_node_tensor_mut(n, f)?;
        }
    }
    for ti in &mut m.training_info {
        for g in [&mut ti.initialization, &mut ti.algorithm]
            .into_iter()
            .flatten()
        {
            for_each_tensor_mut(g, f)?;
        }
    }
    Ok(())
}

/// Pulls every external-data payload of `model` into `raw_data` (as slices of the mapped side files,
/// not copies) and clears the external references, so that the model no longer depends on its
/// directory. `base_dir` is the directory the model was loaded from.
pub fn load_external_data(model: &mut ModelProto, base_dir: &Path) -> Result<(), OnnxError> {
    let mut reader = ExternalDataReader::new(base_dir);
    for_each_model_tensor_mut(model, &mut |t: &mut TensorProto| {
        if !is_external(t) {
            return Ok(());
        }
        let TensorStorage::Raw(raw) = tensor_bytes(t, &mut reader)? else {
            return Err(OnnxError::tensor(
                tensor_name(t),
                "string tensors cannot be stored externally",
            ));
        };
        t.raw_data = Some(raw);
        t.external_data.clear();
        t.data_location = None;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::StringStringEntryProto;
    use crate::testutil::TempDir;

    fn kv(k: &str, v: &str) -> StringStringEntryProto {
        StringStringEntryProto {
            key: Some(k.into()),
            value: Some(v.into()),
        }
    }

    fn ext_tensor(name: &str, dims: Vec<i64>, keys: &[(&str, &str)]) -> TensorProto {
        TensorProto {
            name: Some(name.into()),
            data_type: Some(code::FLOAT),
            dims,
            data_location: Some(1),
            external_data: keys.iter().map(|(k, v)| kv(k, v)).collect(),
            ..Default::default()
        }
    }

    fn raw(s: TensorStorage) -> Vec<u8> {
        match s {
            TensorStorage::Raw(b) => b.to_vec(),
            TensorStorage::Strings(_) => panic!("expected raw bytes"),
        }
    }

    #[test]
    fn typed_fields_become_little_endian_bytes() {
        let mut ext = ExternalDataReader::none();
        let t = TensorProto {
            data_type: Some(code::FLOAT),
            dims: vec![2],
            float_data: vec![1.0, -2.5],
            ..Default::default()
        };
        let mut want = 1.0f32.to_le_bytes().to_vec();
        want.extend_from_slice(&(-2.5f32).to_le_bytes());
        assert_eq!(raw(tensor_bytes(&t, &mut ext).unwrap()), want);

        // f16 bit patterns live in int32_data, two bytes each.
        let t = TensorProto {
            data_type: Some(code::FLOAT16),
            dims: vec![2],
            int32_data: vec![0x3c00, 0xc000],
            ..Default::default()
        };
        assert_eq!(
            raw(tensor_bytes(&t, &mut ext).unwrap()),
            vec![0x00, 0x3c, 0x00, 0xc0]
        );

        let t = TensorProto {
            data_type: Some(9),
            dims: vec![3],
            int32_data: vec![1, 0, 1],
            ..Default::default()
        };
        assert_eq!(raw(tensor_bytes(&t, &mut ext).unwrap()), vec![1, 0, 1]);

        // int4: three elements packed in two int32 entries (one byte each).
        let t = TensorProto {
            data_type: Some(22),
            dims: vec![3],
            int32_data: vec![0x21, 0x03],
            ..Default::default()
        };
        assert_eq!(raw(tensor_bytes(&t, &mut ext).unwrap()), vec![0x21, 0x03]);

        let t = TensorProto {
            data_type: Some(code::UINT32),
            dims: vec![1],
            uint64_data: vec![7],
            ..Default::default()
        };
        assert_eq!(raw(tensor_bytes(&t, &mut ext).unwrap()), vec![7, 0, 0, 0]);

        let t = TensorProto {
            data_type: Some(code::INT64),
            dims: vec![],
            int64_data: vec![-1],
            ..Default::default()
        };
        assert_eq!(raw(tensor_bytes(&t, &mut ext).unwrap()), vec![0xff; 8]);

        // float6: 4 values -> 3 bytes, LSB-first bitstream.
        let t = TensorProto {
            data_type: Some(code::FLOAT6E2M3),
            dims: vec![4],
            int32_data: vec![1, 2, 3, 4],
            ..Default::default()
        };
        let (x0, x1, x2, x3) = (1u8, 2u8, 3u8, 4u8);
        let want = vec![
            x0 | ((x1 & 3) << 6),
            (x1 >> 2) | ((x2 & 0xf) << 4),
            (x2 >> 4) | (x3 << 2),
        ];
        assert_eq!(raw(tensor_bytes(&t, &mut ext).unwrap()), want);

        let t = TensorProto {
            data_type: Some(code::STRING),
            dims: vec![1],
            string_data: vec![Bytes::from_static(b"hi")],
            ..Default::default()
        };
        assert_eq!(
            tensor_bytes(&t, &mut ext).unwrap(),
            TensorStorage::Strings(vec![Bytes::from_static(b"hi")])
        );
    }

    #[test]
    fn wrong_field_and_wrong_length_are_named() {
        let mut ext = ExternalDataReader::none();
        let t = TensorProto {
            name: Some("w".into()),
            data_type: Some(code::INT64),
            dims: vec![1],
            float_data: vec![1.0],
            ..Default::default()
        };
        assert_eq!(
            tensor_bytes(&t, &mut ext).unwrap_err().to_string(),
            "tensor 'w': float_data holds 1 elements but data_type 7 stores its elements in int64_data"
        );
        let t = TensorProto {
            name: Some("w".into()),
            data_type: Some(code::FLOAT),
            dims: vec![2, 3],
            raw_data: Some(Bytes::from(vec![0; 20])),
            ..Default::default()
        };
        assert_eq!(
            tensor_bytes(&t, &mut ext).unwrap_err().to_string(),
            "tensor 'w': raw_data has 20 bytes, data_type 1 with dims [2, 3] needs 24"
        );
        let t = TensorProto {
            name: Some("w".into()),
            data_type: Some(0),
            dims: vec![1],
            ..Default::default()
        };
        assert_eq!(
            tensor_bytes(&t, &mut ext).unwrap_err().to_string(),
            "tensor 'w': unknown or undefined data_type 0"
        );
        let t = TensorProto {
            name: Some("w".into()),
            data_type: Some(1),
            dims: vec![-1],
            ..Default::default()
        };
        assert_eq!(
            tensor_bytes(&t, &mut ext).unwrap_err().to_string(),
            "tensor 'w': negative dim -1"
        );
    }

    #[test]
    fn external_data_is_read_and_checked() {
        let dir = TempDir::new("ext_read");
        let data: Vec<u8> = (0..64u8).collect();
        std::fs::write(dir.path().join("w.bin"), &data).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/v.bin"), &data).unwrap();
        let mut ext = ExternalDataReader::new(dir.path());

        let t = ext_tensor(
            "a",
            vec![2],
            &[("location", "w.bin"), ("offset", "8"), ("length", "8")],
        );
        assert_eq!(
            raw(tensor_bytes(&t, &mut ext).unwrap()),
            data[8..16].to_vec()
        );
        let t = ext_tensor(
            "b",
            vec![4],
            &[("location", "./sub/../sub/v.bin"), ("offset", "48")],
        );
        assert_eq!(
            raw(tensor_bytes(&t, &mut ext).unwrap()),
            data[48..64].to_vec()
        );

        let cases: Vec<(TensorProto, &str)> = vec![
            (ext_tensor("c", vec![2], &[("location", "/etc/passwd")]), "tensor 'c': external data '/etc/passwd': absolute paths are not allowed; locations are relative to the model's directory"),
            (ext_tensor("d", vec![2], &[("location", "sub/../../w.bin")]), "tensor 'd': external data 'sub/../../w.bin': '..' escapes the model's directory"),
            (ext_tensor("e", vec![2], &[("location", "w.bin"), ("offset", "100")]), "offset 100 is past the end of"),
            (ext_tensor("f", vec![2], &[("location", "w.bin"), ("offset", "60"), ("length", "8")]), "offset 60 + length 8 exceeds"),
            (ext_tensor("g", vec![2], &[("location", "missing.bin")]), "tensor 'g': external data 'missing.bin': cannot open"),
            (ext_tensor("h", vec![2], &[("location", "w.bin"), ("offset", "-4")]), "tensor 'h': external data 'w.bin': 'offset' is '-4', not a non-negative integer"),
            (ext_tensor("i", vec![2], &[("offset", "0")]), "tensor 'i': external data '': data_location is EXTERNAL but there is no 'location' key"),
            (ext_tensor("j", vec![2], &[("location", "w.bin"), ("length", "4")]), "tensor 'j': external data has 4 bytes, data_type 1 with dims [2] needs 8"),
        ];
        for (t, want) in cases {
            let msg = tensor_bytes(&t, &mut ext).unwrap_err().to_string();
            assert!(msg.contains(want), "{msg}\n  should contain: {want}");
            assert!(!msg.contains('\n'));
        }
    }

    #[cfg(unix)]
    #[test]
    fn symlink_out_of_the_directory_is_rejected() {
        let outer = TempDir::new("ext_symlink");
        let model_dir = outer.path().join("model");
        std::fs::create_dir(&model_dir).unwrap();
        std::fs::write(outer.path().join("secret.bin"), [0u8; 8]).unwrap();
        std::os::unix::fs::symlink(outer.path().join("secret.bin"), model_dir.join("w.bin"))
            .unwrap();
        let mut ext = ExternalDataReader::new(&model_dir);
        let t = ext_tensor("s", vec![2], &[("location", "w.bin")]);
        let msg = tensor_bytes(&t, &mut ext).unwrap_err().to_string();
        assert!(msg.contains("outside the model's directory"), "{msg}");
    }

    #[test]
    fn load_external_data_inlines_as_mapped_slices() {
        let dir = TempDir::new("ext_load");
        std::fs::write(dir.path().join("w.bin"), [1u8, 0, 0, 0, 2, 0, 0, 0]).unwrap();
        let mut m = ModelProto {
            graph: Some(GraphProto {
                initializer: vec![ext_tensor("w", vec![2], &[("location", "w.bin")])],
                ..Default::default()
            }),
            ..Default::default()
        };
        load_external_data(&mut m, dir.path()).unwrap();
        let t = &m.graph.as_ref().unwrap().initializer[0];
        assert_eq!(t.raw_data.as_deref(), Some(&[1u8, 0, 0, 0, 2, 0, 0, 0][..]));
        assert!(t.external_data.is_empty() && t.data_location.is_none());
    }
}
