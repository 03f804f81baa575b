//! Writing a `ModelProto`: atomically (temporary file + rename), inline or with external data.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use prost::Message;

use crate::data::{
    for_each_model_tensor_mut, is_external, tensor_bytes, tensor_name, ExternalDataReader,
    TensorStorage,
};
use crate::error::OnnxError;
use crate::proto::{GraphProto, ModelProto, StringStringEntryProto, TensorProto};

/// Where tensor payloads go when a model is saved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExternalData {
    /// Every payload inside the model file (protobuf limits the file to 2 GiB).
    Inline,
    /// Initializers of at least [`DEFAULT_THRESHOLD`] bytes in one side file with this name, in the
    /// model's directory; smaller ones inline.
    File(String),
    /// Initializers of at least `threshold` bytes in `<model file name>.data` next to the model;
    /// smaller ones inline. No side file is written when no initializer reaches the threshold.
    /// Hazard: a threshold below a shape constant's size (e.g. 0) moves shape constants out too, and
    /// onnx/onnxruntime shape inference cannot read external tensors.
    Auto { threshold: u64 },
}

impl ExternalData {
    /// The side file's name, in the model's directory, for a model file named `file_name` (`None`
    /// inline). With [`ExternalData::Auto`] it is written only when an initializer reaches the
    /// threshold.
    pub fn side_file(&self, file_name: &str) -> Option<String> {
        match self {
            ExternalData::Inline => None,
            ExternalData::File(name) => Some(name.clone()),
            ExternalData::Auto { .. } => Some(format!("{file_name}.data")),
        }
    }
}

/// The size below which [`ExternalData::File`] keeps initializers inline (onnx's default, 1 KiB): small
/// tensors are mostly shape constants, which shape inference must read from the model file.
pub const DEFAULT_THRESHOLD: u64 = 1024;

/// Offsets in a side file: payloads of at least 4 KiB start on a 4 KiB boundary (page-aligned for
/// mmap), smaller ones on a 64-byte boundary. Padding bytes are zero.
const PAGE: u64 = 4096;
const SMALL_ALIGN: u64 = 64;

/// protobuf cannot encode or parse messages of 2 GiB or more.
const PROTOBUF_LIMIT: u64 = i32::MAX as u64;

/// Saves `model` to `path`, placing payloads as `mode` says.
///
/// Payloads that are still external references are an error here (the source directory is unknown):
/// use [`save_model_proto_with`] with a reader for the directory the model was loaded from, or call
/// [`crate::data::load_external_data`] first.
///
/// Contract: the output appears complete or not at all. Each file (side file first, then the model) is
/// written to a temporary file in the same directory and renamed over the target, so saving over the
/// model (or side file) being read, even while it is memory-mapped, is safe: the mapping keeps the old
/// file's contents.
pub fn save_model_proto(
    model: &ModelProto,
    path: impl AsRef<Path>,
    mode: ExternalData,
) -> Result<(), OnnxError> {
    save_model_proto_with(model, path, mode, &mut ExternalDataReader::none())
}

/// [`save_model_proto`], reading payloads that are still external references through `source`.
pub fn save_model_proto_with(
    model: &ModelProto,
    path: impl AsRef<Path>,
    mode: ExternalData,
    source: &mut ExternalDataReader,
) -> Result<(), OnnxError> {
    let path = path.as_ref();
    let save_err = |reason: String| OnnxError::Save {
        path: path.to_path_buf(),
        reason,
    };
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| save_err("the path has no UTF-8 file name".into()))?
        .to_string();
    let dir = crate::load::model_dir(path).to_path_buf();

    let mut model = model.clone();
    // Every payload in memory first: side files of the source may be the ones about to be replaced.
    for_each_model_tensor_mut(&mut model, &mut |t: &mut TensorProto| {
        if is_external(t) {
            let TensorStorage::Raw(raw) = tensor_bytes(t, source)? else {
                return Err(OnnxError::tensor(
                    tensor_name(t),
                    "string tensors cannot be stored externally",
                ));
            };
            set_inline(t, raw);
        }
        Ok(())
    })?;

    let location = mode.side_file(&file_name);
    let threshold = match &mode {
        ExternalData::Inline => 0,
        ExternalData::File(name) => {
            check_side_file_name(name).map_err(save_err)?;
            DEFAULT_THRESHOLD
        }
        ExternalData::Auto { threshold } => *threshold,
    };
    if let Some(loc) = &location {
        if *loc == file_name {
            return Err(save_err(format!(
                "the external data file '{loc}' would be the model file itself"
            )));
        }
        let mut chunks: Vec<(u64, Bytes)> = Vec::new();
        let mut end = 0u64;
        if let Some(g) = &mut model.graph {
            move_initializers(g, loc, threshold, &mut chunks, &mut end)?;
        }
        if !chunks.is_empty() {
            let data_path = dir.join(loc);
            write_atomic(&data_path, |w| {
                let mut pos = 0u64;
                for (offset, bytes) in &chunks {
                    write_zeros(w, offset - pos)?;
                    w.write_all(bytes)?;
                    pos = offset + bytes.len() as u64;
                }
                Ok(())
            })?;
        }
    }

    let len = model.encoded_len() as u64;
    if len > PROTOBUF_LIMIT {
        return Err(save_err(format!(
            "the model encodes to {len} bytes, over protobuf's 2 GiB limit; save with external data"
        )));
    }
    let mut buf = Vec::with_capacity(len as usize);
    model
        .encode(&mut buf)
        .map_err(|e| save_err(format!("encoding failed: {e}")))?;
    write_atomic(path, |w| w.write_all(&buf))
}

/// A side-file name must be one plain relative file name (it is written next to the model).
fn check_side_file_name(name: &str) -> Result<(), String> {
    let mut comps = Path::new(name).components();
    match (comps.next(), comps.next()) {
        (Some(Component::Normal(_)), None) => Ok(()),
        _ => Err(format!(
            "external data file name '{name}' must be a plain file name without directories"
        )),
    }
}

fn set_inline(t: &mut TensorProto, raw: Bytes) {
    clear_typed(t);
    t.raw_data = Some(raw);
    t.external_data.clear();
    t.data_location = None;
}

fn clear_typed(t: &mut TensorProto) {
    t.float_data.clear();
    t.int32_data.clear();
    t.int64_data.clear();
    t.double_data.clear();
    t.uint64_data.clear();
}

fn move_initializers(
    g: &mut GraphProto,
    location: &str,
    threshold: u64,
    chunks: &mut Vec<(u64, Bytes)>,
    end: &mut u64,
) -> Result<(), OnnxError> {
    for t in &mut g.initializer {
        let mut none = ExternalDataReader::none();
        let TensorStorage::Raw(raw) = tensor_bytes(t, &mut none)? else {
            continue; // string tensors stay inline
        };
        let len = raw.len() as u64;
        if len < threshold.max(1) {
            continue;
        }
        let align = if len >= PAGE { PAGE } else { SMALL_ALIGN };
        let offset = end.div_ceil(align) * align;
        *end = offset + len;
        clear_typed(t);
        t.raw_data = None;
        t.data_location = Some(crate::proto::tensor_proto::DataLocation::External as i32);
        t.external_data = vec![
            kv("location", location),
            kv("offset", &offset.to_string()),
            kv("length", &len.to_string()),
        ];
        chunks.push((offset, raw));
    }
    for n in &mut g.node {
        for a in &mut n.attribute {
            for sg in a.g.iter_mut().chain(a.graphs.iter_mut()) {
                move_initializers(sg, location, threshold, chunks, end)?;
            }
        }
    }
    Ok(())
}

fn kv(k: &str, v: &str) -> StringStringEntryProto {
    StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v.into()),
    }
}

fn write_zeros(w: &mut impl Write, mut n: u64) -> std::io::Result<()> {
    const ZEROS: [u8; 4096] = [0; 4096];
    while n > 0 {
        let k = n.min(ZEROS.len() as u64) as usize;
        w.write_all(&ZEROS[..k])?;
        n -= k as u64;
    }
    Ok(())
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes a file atomically: `body` writes into a new temporary file in the target's directory, which
/// is flushed, synced and renamed over `path`. On any error the temporary file is removed and `path`
/// is untouched.
pub fn write_atomic(
    path: &Path,
    body: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> Result<(), OnnxError> {
    let dir = crate::load::model_dir(path);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (tmp, file) = loop {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp: PathBuf = dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(OnnxError::io(&tmp, "cannot create temporary file", e)),
        }
    };
    let result = (|| {
        let mut w = BufWriter::new(file);
        body(&mut w)?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()
    })();
    let result = result
        .map_err(|e| OnnxError::io(&tmp, "cannot write", e))
        .and_then(|()| {
            std::fs::rename(&tmp, path)
                .map_err(|e| OnnxError::io(path, "cannot rename temporary file onto", e))
        });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{external_ref, load_external_data};
    use crate::load::{load_model_proto, model_dir};
    use crate::proto::NodeProto;
    use crate::testutil::TempDir;

    fn model() -> ModelProto {
        let big = TensorProto {
            name: Some("big".into()),
            data_type: Some(1),
            dims: vec![2000],
            raw_data: Some(Bytes::from(
                (0..8000u32).map(|i| i as u8).collect::<Vec<u8>>(),
            )),
            ..Default::default()
        };
        let small = TensorProto {
            name: Some("small".into()),
            data_type: Some(7),
            dims: vec![2],
            int64_data: vec![3, -4],
            ..Default::default()
        };
        let text = TensorProto {
            name: Some("text".into()),
            data_type: Some(8),
            dims: vec![1],
            string_data: vec![Bytes::from_static(b"s")],
            ..Default::default()
        };
        ModelProto {
            ir_version: Some(10),
            graph: Some(GraphProto {
                name: Some("g".into()),
                node: vec![NodeProto {
                    op_type: Some("Add".into()),
                    input: vec!["big".into(), "small".into()],
                    output: vec!["y".into()],
                    ..Default::default()
                }],
                initializer: vec![big, small, text],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn inlined(m: &ModelProto, path: &Path) -> ModelProto {
        let mut m = m.clone();
        load_external_data(&mut m, model_dir(path)).unwrap();
        m
    }

    /// Inline form of the test model, with typed fields turned into raw_data as saving does.
    fn canonical(m: &ModelProto) -> Vec<(String, Vec<u8>)> {
        let mut ext = ExternalDataReader::none();
        m.graph
            .as_ref()
            .unwrap()
            .initializer
            .iter()
            .map(|t| {
                let bytes = match tensor_bytes(t, &mut ext).unwrap() {
                    TensorStorage::Raw(b) => b.to_vec(),
                    TensorStorage::Strings(s) => s.concat(),
                };
                (t.name.clone().unwrap(), bytes)
            })
            .collect()
    }

    #[test]
    fn inline_save_is_byte_identical_and_leaves_no_temp_files() {
        let dir = TempDir::new("save_inline");
        let p = dir.path().join("m.onnx");
        let m = model();
        save_model_proto(&m, &p, ExternalData::Inline).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), m.encode_to_vec());
        assert_eq!(load_model_proto(&p).unwrap(), m);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("m.onnx")]);
    }

    #[test]
    fn auto_moves_large_initializers_with_aligned_offsets() {
        let dir = TempDir::new("save_auto");
        let p = dir.path().join("m.onnx");
        let m = model();
        save_model_proto(&m, &p, ExternalData::Auto { threshold: 1024 }).unwrap();
        let loaded = load_model_proto(&p).unwrap();
        let inits = &loaded.graph.as_ref().unwrap().initializer;
        assert!(is_external(&inits[0]));
        assert_eq!(
            external_ref(&inits[0]).unwrap(),
            crate::data::ExternalRef {
                location: "m.onnx.data".into(),
                offset: 0,
                length: Some(8000)
            }
        );
        assert!(!is_external(&inits[1]) && !is_external(&inits[2]));
        assert_eq!(
            inits[1].int64_data,
            vec![3, -4],
            "small tensors keep their typed form"
        );
        assert_eq!(canonical(&inlined(&loaded, &p)), canonical(&m));
    }

    #[test]
    fn file_mode_moves_large_initializers_and_overwrites_its_own_input() {
        let dir = TempDir::new("save_file");
        let p = dir.path().join("m.onnx");
        let m = model();
        save_model_proto(&m, &p, ExternalData::File("w.bin".into())).unwrap();
        let loaded = load_model_proto(&p).unwrap();
        let inits = &loaded.graph.as_ref().unwrap().initializer;
        let r0 = external_ref(&inits[0]).unwrap();
        assert_eq!(
            (r0.location.as_str(), r0.offset, r0.length),
            ("w.bin", 0, Some(8000))
        );
        assert!(!is_external(&inits[1]) && !is_external(&inits[2]));
        assert_eq!(
            std::fs::metadata(dir.path().join("w.bin")).unwrap().len(),
            8000
        );

        // Save the loaded (still external, side file mapped) model over itself, inline this time.
        let mut reader = ExternalDataReader::new(dir.path());
        let _mapped_before = reader.read(&inits[0]).unwrap();
        save_model_proto_with(&loaded, &p, ExternalData::Inline, &mut reader).unwrap();
        let again = load_model_proto(&p).unwrap();
        assert!(again
            .graph
            .as_ref()
            .unwrap()
            .initializer
            .iter()
            .all(|t| !is_external(t)));
        assert_eq!(canonical(&again), canonical(&m));

        // And again into the same side file name while the old one is mapped.
        let mut reader = ExternalDataReader::new(dir.path());
        save_model_proto_with(&again, &p, ExternalData::File("w.bin".into()), &mut reader).unwrap();
        assert_eq!(
            canonical(&inlined(&load_model_proto(&p).unwrap(), &p)),
            canonical(&m)
        );
    }

    #[test]
    fn offsets_are_aligned() {
        let dir = TempDir::new("save_align");
        let p = dir.path().join("m.onnx");
        let m = model();
        save_model_proto(&m, &p, ExternalData::Auto { threshold: 1 }).unwrap();
        let loaded = load_model_proto(&p).unwrap();
        let inits = &loaded.graph.as_ref().unwrap().initializer;
        let r1 = external_ref(&inits[1]).unwrap();
        assert_eq!(
            (r1.offset, r1.length),
            (8000, Some(16)),
            "8000 is already 64-aligned"
        );
        assert!(!is_external(&inits[2]), "string tensors stay inline");

        // A 16-byte tensor first pushes the 8000-byte one to the next page.
        let mut m2 = m.clone();
        m2.graph.as_mut().unwrap().initializer.swap(0, 1);
        save_model_proto(&m2, &p, ExternalData::Auto { threshold: 1 }).unwrap();
        let loaded = load_model_proto(&p).unwrap();
        let r = external_ref(&loaded.graph.as_ref().unwrap().initializer[1]).unwrap();
        assert_eq!((r.offset, r.length), (4096, Some(8000)));
        assert_eq!(
            std::fs::metadata(dir.path().join("m.onnx.data"))
                .unwrap()
                .len(),
            4096 + 8000
        );
        assert_eq!(canonical(&inlined(&loaded, &p)), canonical(&m2));
    }

    #[test]
    fn bad_requests_are_errors() {
        let dir = TempDir::new("save_bad");
        let p = dir.path().join("m.onnx");
        let m = model();
        let msg = save_model_proto(&m, &p, ExternalData::File("../x.bin".into()))
            .unwrap_err()
            .to_string();
        assert!(
            msg.ends_with(
                "external data file name '../x.bin' must be a plain file name without directories"
            ),
            "{msg}"
        );
        let msg = save_model_proto(&m, &p, ExternalData::File("m.onnx".into()))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("would be the model file itself"), "{msg}");

        // Still-external payloads need a reader for their directory.
        save_model_proto(&m, &p, ExternalData::Auto { threshold: 0 }).unwrap();
        let loaded = load_model_proto(&p).unwrap();
        let other = dir.path().join("copy.onnx");
        let msg = save_model_proto(&loaded, &other, ExternalData::Inline)
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with(
                "tensor 'big': external data 'm.onnx.data': the model has no directory"
            ),
            "{msg}"
        );
        assert!(!other.exists());

        let msg = save_model_proto(
            &m,
            dir.path().join("no/such/dir/m.onnx"),
            ExternalData::Inline,
        )
        .unwrap_err()
        .to_string();
        assert!(msg.contains("cannot create temporary file"), "{msg}");
    }
}
