//! Constant tensor data (initializers, Constant values, tensor attributes), held without copying.

use bytes::Bytes;

use crate::dtype::DataType;

/// Where a constant tensor's bytes came from, so that export can keep them where they were.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum DataOrigin {
    /// Stored inside the model file (or made in memory).
    #[default]
    Inline,
    /// Read from an external-data side file at `location` (relative to the model's directory).
    External {
        location: String,
        offset: u64,
        length: u64,
    },
}

/// The payload of a constant tensor.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorStorage {
    /// Little-endian packed elements (sub-byte types packed two or four per byte, as ONNX stores them).
    Raw(Bytes),
    /// One byte string per element, for `DataType::String`.
    Strings(Vec<Bytes>),
}

/// A constant tensor: element type, concrete dims and bytes. Cloning shares the bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorData {
    pub name: String,
    pub dtype: DataType,
    pub dims: Vec<u64>,
    pub storage: TensorStorage,
    pub origin: DataOrigin,
    pub doc: String,
    /// ONNX `metadata_props` of the tensor, in file order.
    pub metadata: Vec<(String, String)>,
}

/// A constant tensor whose byte length disagrees with its dims and type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("tensor '{name}': {dtype} {dims:?} needs {expected} bytes, has {actual}")]
pub struct TensorSizeError {
    pub name: String,
    pub dtype: DataType,
    pub dims: Vec<u64>,
    pub expected: u64,
    pub actual: u64,
}

impl TensorData {
    /// A tensor over raw little-endian bytes; checks that the byte length matches dims and type.
    pub fn from_raw(
        name: impl Into<String>,
        dtype: DataType,
        dims: Vec<u64>,
        raw: Bytes,
    ) -> Result<TensorData, TensorSizeError> {
        let name = name.into();
        let expected = dtype.bytes_for(numel(&dims));
        if dtype != DataType::String && expected != raw.len() as u64 {
            return Err(TensorSizeError {
                name,
                dtype,
                dims,
                expected,
                actual: raw.len() as u64,
            });
        }
        Ok(TensorData {
            name,
            dtype,
            dims,
            storage: TensorStorage::Raw(raw),
            origin: DataOrigin::Inline,
            doc: String::new(),
            metadata: Vec::new(),
        })
    }

    /// Element count.
    pub fn numel(&self) -> u64 {
        numel(&self.dims)
    }

    /// Bytes the tensor occupies in memory (strings count one handle per element).
    pub fn byte_len(&self) -> u64 {
        self.dtype.bytes_for(self.numel())
    }

    pub fn raw(&self) -> Option<&Bytes> {
        match &self.storage {
            TensorStorage::Raw(b) => Some(b),
            TensorStorage::Strings(_) => None,
        }
    }

    /// The elements as i64, for integer and bool tensors; `None` for other types.
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        let raw = self.raw()?;
        let b = raw.as_ref();
        macro_rules! read {
            ($t:ty, $w:expr) => {
                b.chunks_exact($w)
                    .map(|c| <$t>::from_le_bytes(c.try_into().unwrap_or([0; $w])) as i64)
                    .collect()
            };
        }
        Some(match self.dtype {
            DataType::I64 => read!(i64, 8),
            DataType::U64 => b
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as i64)
                .collect(),
            DataType::I32 => read!(i32, 4),
            DataType::U32 => read!(u32, 4),
            DataType::I16 => read!(i16, 2),
            DataType::U16 => read!(u16, 2),
            DataType::I8 => b.iter().map(|&x| x as i8 as i64).collect(),
            DataType::U8 => b.iter().map(|&x| x as i64).collect(),
            DataType::Bool => b.iter().map(|&x| (x != 0) as i64).collect(),
            _ => return None,
        })
    }

    /// The elements as f64, for float and integer tensors; `None` for strings and exotic types.
    pub fn to_f64_vec(&self) -> Option<Vec<f64>> {
        let raw = self.raw()?;
        let b = raw.as_ref();
        Some(match self.dtype {
            DataType::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap_or([0; 4])) as f64)
                .collect(),
            DataType::F64 => b
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
            DataType::F16 => b
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
                .collect(),
            DataType::BF16 => b
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64())
                .collect(),
            _ => self.to_i64_vec()?.into_iter().map(|v| v as f64).collect(),
        })
    }

    /// A 1-element or 0-d tensor's value as i64.
    pub fn scalar_i64(&self) -> Option<i64> {
        let v = self.to_i64_vec()?;
        (v.len() == 1).then(|| v[0])
    }

    /// Builds an i64 tensor from values.
    pub fn from_i64(name: impl Into<String>, dims: Vec<u64>, values: &[i64]) -> TensorData {
        let mut raw = Vec::with_capacity(values.len() * 8);
        for v in values {
            raw.extend_from_slice(&v.to_le_bytes());
        }
        TensorData {
            name: name.into(),
            dtype: DataType::I64,
            dims,
            storage: TensorStorage::Raw(Bytes::from(raw)),
            origin: DataOrigin::Inline,
            doc: String::new(),
            metadata: Vec::new(),
        }
    }

    /// Builds an f32 tensor from values.
    pub fn from_f32(name: impl Into<String>, dims: Vec<u64>, values: &[f32]) -> TensorData {
        let mut raw = Vec::with_capacity(values.len() * 4);
        for v in values {
            raw.extend_from_slice(&v.to_le_bytes());
        }
        TensorData {
            name: name.into(),
            dtype: DataType::F32,
            dims,
            storage: TensorStorage::Raw(Bytes::from(raw)),
            origin: DataOrigin::Inline,
            doc: String::new(),
            metadata: Vec::new(),
        }
    }
}

/// Product of dims, saturating.
pub fn numel(dims: &[u64]) -> u64 {
    dims.iter().fold(1u64, |a, &d| a.saturating_mul(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_mismatch_is_an_error_naming_the_tensor() {
        let e = TensorData::from_raw("w", DataType::F32, vec![2, 3], Bytes::from(vec![0u8; 20]))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "tensor 'w': float [2, 3] needs 24 bytes, has 20"
        );
    }

    #[test]
    fn integer_and_float_views() {
        let t = TensorData::from_i64("s", vec![3], &[4, -1, 7]);
        assert_eq!(t.to_i64_vec(), Some(vec![4, -1, 7]));
        assert_eq!(t.to_f64_vec(), Some(vec![4.0, -1.0, 7.0]));
        assert_eq!(t.scalar_i64(), None);
        let f = TensorData::from_f32("f", vec![], &[1.5]);
        assert_eq!(f.to_f64_vec(), Some(vec![1.5]));
        assert_eq!(f.to_i64_vec(), None);
        assert_eq!(f.byte_len(), 4);
    }
}
