//! Run-time tensors: element type, concrete shape, and bytes that are either a counted [`Buf`]
//! (shared by views through an `Arc`) or borrowed model bytes (weights, zero-copy when aligned).

use std::sync::Arc;

use bytes::Bytes;
use memplan_ir::DataType;

use crate::mem::{AllocError, Buf, MemStats};

#[derive(Clone, Debug)]
enum Data {
    /// `len` bytes at `offset` of a shared buffer.
    Buf {
        buf: Arc<Buf>,
        offset: usize,
        len: usize,
    },
    /// Model bytes (little-endian, aligned for the element type).
    Bytes(Bytes),
}

/// A dense row-major tensor. Cloning shares the bytes.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub dtype: DataType,
    pub shape: Vec<usize>,
    data: Data,
}

/// Element types that kernels read and write directly.
pub trait Element: bytemuck::Pod + Send + Sync + 'static {
    const DTYPE: DataType;
}

macro_rules! element {
    ($t:ty, $d:ident) => {
        impl Element for $t {
            const DTYPE: DataType = DataType::$d;
        }
    };
}
element!(f32, F32);
element!(f64, F64);
element!(i64, I64);
element!(i32, I32);
element!(i16, I16);
element!(i8, I8);
element!(u8, U8);
element!(u16, U16);
element!(u32, U32);
element!(u64, U64);
element!(half::f16, F16);
element!(half::bf16, BF16);

/// A tensor access that does not fit the tensor.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TensorError {
    #[error("tensor is {have}, read as {want}")]
    Type { have: DataType, want: DataType },
    #[error("tensor bytes are shared; cannot write")]
    Shared,
    #[error("tensor of type {0} cannot be held in memory by the executor")]
    Unsupported(DataType),
    #[error(transparent)]
    Alloc(#[from] AllocError),
    #[error("a view of {want} bytes at {offset} exceeds the tensor's {have} bytes")]
    View {
        offset: usize,
        want: usize,
        have: usize,
    },
}

/// Bytes per element for types the executor holds (bool is one byte).
pub fn elem_size(d: DataType) -> Result<usize, TensorError> {
    match d.bits() {
        8 | 16 | 32 | 64 if d != DataType::String => Ok(d.bits() as usize / 8),
        _ => Err(TensorError::Unsupported(d)),
    }
}

impl Tensor {
    /// A zeroed tensor charged to `stats`.
    pub fn zeros(
        dtype: DataType,
        shape: &[usize],
        stats: Option<&Arc<MemStats>>,
    ) -> Result<Tensor, TensorError> {
        let n: usize = shape.iter().product();
        let len = n
            .checked_mul(elem_size(dtype)?)
            .ok_or(AllocError(usize::MAX))?;
        let buf = Buf::zeroed(len, stats)?;
        Ok(Tensor {
            dtype,
            shape: shape.to_vec(),
            data: Data::Buf {
                buf: Arc::new(buf),
                offset: 0,
                len,
            },
        })
    }

    /// A tensor over model bytes; copies into a (counted) buffer when the bytes are misaligned.
    pub fn from_bytes(
        dtype: DataType,
        shape: &[usize],
        bytes: Bytes,
        stats: Option<&Arc<MemStats>>,
    ) -> Result<Tensor, TensorError> {
        let es = elem_size(dtype)?;
        let n: usize = shape.iter().product();
        if bytes.len() != n * es {
            return Err(TensorError::View {
                offset: 0,
                want: n * es,
                have: bytes.len(),
            });
        }
        if (bytes.as_ptr() as usize).checked_rem(es) == Some(0) {
            return Ok(Tensor {
                dtype,
                shape: shape.to_vec(),
                data: Data::Bytes(bytes),
            });
        }
        let mut t = Tensor::zeros(dtype, shape, stats)?;
        t.bytes_mut()?.copy_from_slice(&bytes);
        Ok(t)
    }

    /// A tensor holding a copy of `values`.
    pub fn from_vec<T: Element>(
        shape: &[usize],
        values: &[T],
        stats: Option<&Arc<MemStats>>,
    ) -> Result<Tensor, TensorError> {
        let mut t = Tensor::zeros(T::DTYPE, shape, stats)?;
        let dst = t.data_mut::<T>()?;
        if dst.len() != values.len() {
            return Err(TensorError::View {
                offset: 0,
                want: values.len(),
                have: dst.len(),
            });
        }
        dst.copy_from_slice(values);
        Ok(t)
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The tensor's bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            Data::Buf { buf, offset, len } => &buf.as_bytes()[*offset..*offset + *len],
            Data::Bytes(b) => b,
        }
    }

    /// The tensor's bytes for writing; fails when they are shared with another tensor or the model.
    pub fn bytes_mut(&mut self) -> Result<&mut [u8], TensorError> {
        match &mut self.data {
            Data::Buf { buf, offset, len } => {
                let b = Arc::get_mut(buf).ok_or(TensorError::Shared)?;
                Ok(&mut b.as_bytes_mut()[*offset..*offset + *len])
            }
            Data::Bytes(_) => Err(TensorError::Shared),
        }
    }

    /// Elements as `&[T]`; bool tensors read as `u8`.
    pub fn data<T: Element>(&self) -> Result<&[T], TensorError> {
        self.check::<T>()?;
        bytemuck::try_cast_slice(self.bytes()).map_err(|_| TensorError::Shared)
    }

    /// Elements as `&mut [T]` when the bytes are not shared.
    pub fn data_mut<T: Element>(&mut self) -> Result<&mut [T], TensorError> {
        self.check::<T>()?;
        bytemuck::try_cast_slice_mut(self.bytes_mut()?).map_err(|_| TensorError::Shared)
    }

    fn check<T: Element>(&self) -> Result<(), TensorError> {
        let ok =
            self.dtype == T::DTYPE || (self.dtype == DataType::Bool && T::DTYPE == DataType::U8);
        if ok {
            Ok(())
        } else {
            Err(TensorError::Type {
                have: self.dtype,
                want: T::DTYPE,
            })
        }
    }

    /// The same bytes under another shape of equal element count (Reshape, Squeeze, ...).
    pub fn reshaped(&self, shape: &[usize]) -> Tensor {
        Tensor {
            dtype: self.dtype,
            shape: shape.to_vec(),
            data: self.data.clone(),
        }
    }

    /// A zero-copy view of `shape` starting `offset_elems` elements in.
    pub fn view(&self, offset_elems: usize, shape: &[usize]) -> Result<Tensor, TensorError> {
        let es = elem_size(self.dtype)?;
        let n: usize = shape.iter().product();
        let (off, want) = (offset_elems * es, n * es);
        let have = self.bytes().len();
        if off + want > have {
            return Err(TensorError::View {
                offset: off,
                want,
                have,
            });
        }
        let data = match &self.data {
            Data::Buf { buf, offset, .. } => Data::Buf {
                buf: buf.clone(),
                offset: offset + off,
                len: want,
            },
            Data::Bytes(b) => Data::Bytes(b.slice(off..off + want)),
        };
        Ok(Tensor {
            dtype: self.dtype,
            shape: shape.to_vec(),
            data,
        })
    }

    /// Whether this tensor's bytes live in a counted buffer (not borrowed model bytes).
    pub fn is_owned_buffer(&self) -> bool {
        matches!(self.data, Data::Buf { .. })
    }

    /// Whether `self` and `other` share the same underlying buffer.
    pub fn shares_buffer(&self, other: &Tensor) -> bool {
        match (&self.data, &other.data) {
            (Data::Buf { buf: a, .. }, Data::Buf { buf: b, .. }) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Converts to f32 values (f16/bf16/f64/ints/bool), for comparisons and reduced-precision compute.
    pub fn to_f32_vec(&self) -> Result<Vec<f32>, TensorError> {
        Ok(match self.dtype {
            DataType::F32 => self.data::<f32>()?.to_vec(),
            DataType::F64 => self.data::<f64>()?.iter().map(|&x| x as f32).collect(),
            DataType::F16 => self
                .data::<half::f16>()?
                .iter()
                .map(|x| x.to_f32())
                .collect(),
            DataType::BF16 => self
                .data::<half::bf16>()?
                .iter()
                .map(|x| x.to_f32())
                .collect(),
            DataType::I64 => self.data::<i64>()?.iter().map(|&x| x as f32).collect(),
            DataType::I32 => self.data::<i32>()?.iter().map(|&x| x as f32).collect(),
            DataType::Bool | DataType::U8 => self.data::<u8>()?.iter().map(|&x| x as f32).collect(),
            DataType::I8 => self.data::<i8>()?.iter().map(|&x| x as f32).collect(),
            d => return Err(TensorError::Unsupported(d)),
        })
    }

    /// Integer contents as i64 (for index and shape operands).
    pub fn to_i64_vec(&self) -> Result<Vec<i64>, TensorError> {
        Ok(match self.dtype {
            DataType::I64 => self.data::<i64>()?.to_vec(),
            DataType::I32 => self.data::<i32>()?.iter().map(|&x| x as i64).collect(),
            DataType::I16 => self.data::<i16>()?.iter().map(|&x| x as i64).collect(),
            DataType::I8 => self.data::<i8>()?.iter().map(|&x| x as i64).collect(),
            DataType::U8 | DataType::Bool => self.data::<u8>()?.iter().map(|&x| x as i64).collect(),
            DataType::U16 => self.data::<u16>()?.iter().map(|&x| x as i64).collect(),
            DataType::U32 => self.data::<u32>()?.iter().map(|&x| x as i64).collect(),
            DataType::U64 => self.data::<u64>()?.iter().map(|&x| x as i64).collect(),
            d => {
                return Err(TensorError::Type {
                    have: d,
                    want: DataType::I64,
                })
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_share_and_free_with_the_last_alias() {
        let s = MemStats::new();
        let t = Tensor::from_vec::<f32>(&[2, 3], &[1., 2., 3., 4., 5., 6.], Some(&s)).unwrap();
        let v = t.view(3, &[3]).unwrap();
        assert_eq!(v.data::<f32>().unwrap(), &[4., 5., 6.]);
        let r = t.reshaped(&[6]);
        assert!(r.shares_buffer(&t));
        assert_eq!(s.current(), 24);
        drop(t);
        drop(r);
        assert_eq!(s.current(), 24, "the view keeps the buffer alive");
        drop(v);
        assert_eq!(s.current(), 0);
    }

    #[test]
    fn shared_bytes_are_read_only_and_types_are_checked() {
        let mut t = Tensor::from_vec::<i64>(&[2], &[7, 8], None).unwrap();
        let alias = t.clone();
        assert_eq!(t.data_mut::<i64>().unwrap_err(), TensorError::Shared);
        drop(alias);
        assert!(t.data_mut::<i64>().is_ok());
        assert!(matches!(t.data::<f32>(), Err(TensorError::Type { .. })));
        assert!(t.view(1, &[2]).is_err());
    }

    #[test]
    fn misaligned_model_bytes_are_copied() {
        let raw = Bytes::from(vec![0u8; 17]);
        let b = raw.slice(1..17);
        let s = MemStats::new();
        let t = Tensor::from_bytes(DataType::F32, &[4], b, Some(&s)).unwrap();
        assert_eq!(t.data::<f32>().unwrap(), &[0.0; 4]);
    }
}
