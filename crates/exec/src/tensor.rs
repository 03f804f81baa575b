//! Run-time tensors: element type, concrete shape, and bytes that are either a counted [`Buf`]
//! (shared by views through an `Arc`), a range of a planned run's [`Arena`], or borrowed model bytes
//! (weights, zero-copy when aligned).

use std::sync::Arc;

use bytes::Bytes;
use memplan_ir::{DataType, SeqKind};

use crate::arena::{self, Arena};
use crate::mem::{AllocError, Buf, MemStats};

#[derive(Clone, Debug)]
enum Data {
    /// `len` bytes at `offset` of a shared buffer.
    Buf {
        buf: Arc<Buf>,
        offset: usize,
        len: usize,
    },
    /// `len` bytes at `offset` of a planned run's arena. The range is writable only through the
    /// tensor holding the sole handle to `write` (the one the interpreter made for the op producing
    /// the value; clones and views share the handle, so none of them can write).
    Arena {
        arena: Arc<Arena>,
        offset: usize,
        len: usize,
        write: Option<Arc<WriteToken>>,
    },
    /// Model bytes (little-endian, aligned for the element type).
    Bytes(Bytes),
}

/// The right to write an arena range (see [`Data::Arena`]).
#[derive(Debug)]
struct WriteToken;

/// A dense row-major tensor. Cloning shares the bytes.
///
/// A sequence or optional value is packed: its elements' bytes one after another (`shape` is then
/// the total element count, `dtype` the elements' type) and `seq` says where each element is. Its
/// bytes are the sum of its elements', as the simulator counts them.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub dtype: DataType,
    pub shape: Vec<usize>,
    data: Data,
    pub seq: Option<Arc<SeqLayout>>,
}

/// The elements of a packed sequence or optional, in order, without gaps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqLayout {
    pub kind: SeqKind,
    pub elems: Vec<SeqElem>,
}

/// One element of a packed sequence: its shape, and its own layout when it is itself a sequence
/// (its `shape` then is its total element count).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqElem {
    pub shape: Vec<usize>,
    pub seq: Option<Arc<SeqLayout>>,
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

/// Bytes per element for types the executor holds in whole bytes (bool is one byte). Sub-byte
/// types (int4, uint4, float4e2m1, int2, uint2) are held packed but have no per-element size, so
/// element-addressed kernels (movement, gather, views) refuse them here.
pub fn elem_size(d: DataType) -> Result<usize, TensorError> {
    match d.bits() {
        8 | 16 | 32 | 64 if d != DataType::String => Ok(d.bits() as usize / 8),
        _ => Err(TensorError::Unsupported(d)),
    }
}

/// Bytes of a tensor of `n` elements of `d`: sub-byte types packed as ONNX stores them (two 4-bit or
/// four 2-bit elements a byte, the last byte padded), the same count as the planner's estimate.
/// The element count of `shape`, or an allocation error when it overflows `usize` (a shape no
/// buffer can hold).
pub fn elem_count(shape: &[usize]) -> Result<usize, TensorError> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or(TensorError::Alloc(AllocError(usize::MAX)))
}

pub fn byte_len(d: DataType, n: usize) -> Result<usize, TensorError> {
    if d == DataType::String {
        return Err(TensorError::Unsupported(d));
    }
    n.checked_mul(d.bits() as usize)
        .map(|b| b.div_ceil(8))
        .ok_or(TensorError::Alloc(AllocError(usize::MAX)))
}

impl Tensor {
    /// A zeroed tensor charged to `stats`.
    pub fn zeros(
        dtype: DataType,
        shape: &[usize],
        stats: Option<&Arc<MemStats>>,
    ) -> Result<Tensor, TensorError> {
        let len = byte_len(dtype, elem_count(shape)?)?;
        let buf = Buf::zeroed(len, stats)?;
        Ok(Tensor {
            dtype,
            shape: shape.to_vec(),
            seq: None,
            data: Data::Buf {
                buf: Arc::new(buf),
                offset: 0,
                len,
            },
        })
    }

    /// A tensor of `shape` over the first bytes of `buf`, whose contents are whatever it held
    /// (a reused staging buffer, written before it is read).
    pub(crate) fn over_buf(
        dtype: DataType,
        shape: &[usize],
        buf: Arc<Buf>,
    ) -> Result<Tensor, TensorError> {
        let len = byte_len(dtype, elem_count(shape)?)?;
        if len > buf.len() {
            return Err(TensorError::View {
                offset: 0,
                want: len,
                have: buf.len(),
            });
        }
        Ok(Tensor {
            dtype,
            shape: shape.to_vec(),
            seq: None,
            data: Data::Buf {
                buf,
                offset: 0,
                len,
            },
        })
    }

    /// The heap buffer behind this tensor, if it has one.
    pub(crate) fn into_buf(self) -> Option<Arc<Buf>> {
        match self.data {
            Data::Buf { buf, .. } => Some(buf),
            _ => None,
        }
    }

    /// A tensor over model bytes; copies into a (counted) buffer when the bytes are misaligned.
    pub fn from_bytes(
        dtype: DataType,
        shape: &[usize],
        bytes: Bytes,
        stats: Option<&Arc<MemStats>>,
    ) -> Result<Tensor, TensorError> {
        let want = byte_len(dtype, elem_count(shape)?)?;
        if bytes.len() != want {
            return Err(TensorError::View {
                offset: 0,
                want,
                have: bytes.len(),
            });
        }
        let align = elem_size(dtype).unwrap_or(1);
        if (bytes.as_ptr() as usize).checked_rem(align) == Some(0) {
            return Ok(Tensor {
                dtype,
                shape: shape.to_vec(),
                seq: None,
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

    /// A zeroed output tensor: in a planned run, the next planned output range of the current node
    /// when it has exactly this size (see [`crate::arena::Cursor`]); otherwise a counted heap buffer.
    pub fn zeros_planned(
        dtype: DataType,
        shape: &[usize],
        stats: &Arc<MemStats>,
    ) -> Result<Tensor, TensorError> {
        Tensor::output_planned(dtype, shape, stats, true)
    }

    /// Like [`Tensor::zeros_planned`] for an op that writes every element: the contents are zeros
    /// or stale values of an earlier buffer (a reused arena range or heap mapping), not zeroed first.
    pub fn for_overwrite_planned(
        dtype: DataType,
        shape: &[usize],
        stats: &Arc<MemStats>,
    ) -> Result<Tensor, TensorError> {
        Tensor::output_planned(dtype, shape, stats, false)
    }

    fn output_planned(
        dtype: DataType,
        shape: &[usize],
        stats: &Arc<MemStats>,
        zero: bool,
    ) -> Result<Tensor, TensorError> {
        let len = byte_len(dtype, elem_count(shape)?)?;
        let slot = {
            let mut c = arena::lock(&stats.cursor);
            if c.arena.is_some() {
                c.take_output(len)
            } else {
                None
            }
        };
        match slot {
            Some((arena, offset)) => {
                let mut t = Tensor::arena_range(dtype, shape, arena, offset, len, true);
                if zero {
                    t.bytes_mut()?.fill(0);
                }
                Ok(t)
            }
            None if zero => Tensor::zeros(dtype, shape, Some(stats)),
            None => Ok(Tensor {
                dtype,
                shape: shape.to_vec(),
                seq: None,
                data: Data::Buf {
                    buf: Arc::new(Buf::for_overwrite(len, Some(stats))?),
                    offset: 0,
                    len,
                },
            }),
        }
    }

    /// A tensor over `offset..offset + len` of `arena`, writable when `writable`.
    ///
    /// The caller (the interpreter) guarantees the arena invariant (see [`crate::arena`]): a range
    /// made writable here is reached by nothing else while this tensor can write it.
    pub(crate) fn arena_range(
        dtype: DataType,
        shape: &[usize],
        arena: Arc<Arena>,
        offset: usize,
        len: usize,
        writable: bool,
    ) -> Tensor {
        Tensor {
            dtype,
            shape: shape.to_vec(),
            seq: None,
            data: Data::Arena {
                arena,
                offset,
                len,
                write: writable.then(|| Arc::new(WriteToken)),
            },
        }
    }

    /// Drops the right to write (arena tensors); the interpreter freezes every value it stores.
    pub(crate) fn freeze(&mut self) {
        if let Data::Arena { write, .. } = &mut self.data {
            *write = None;
        }
    }

    /// The arena and byte range this tensor occupies, if it lives in an arena.
    pub(crate) fn arena_place(&self) -> Option<(&Arc<Arena>, usize, usize)> {
        match &self.data {
            Data::Arena {
                arena, offset, len, ..
            } => Some((arena, *offset, *len)),
            _ => None,
        }
    }

    /// A copy in a fresh heap buffer charged to `stats` (if any).
    pub fn to_owned_buffer(&self, stats: Option<&Arc<MemStats>>) -> Result<Tensor, TensorError> {
        let mut t = Tensor::zeros(self.dtype, &self.shape, stats)?;
        t.bytes_mut()?.copy_from_slice(self.bytes());
        t.seq = self.seq.clone();
        Ok(t)
    }

    /// The elements of a packed sequence or optional, as zero-copy views; `None` for a tensor.
    pub fn elements(&self) -> Option<Result<Vec<Tensor>, TensorError>> {
        let layout = self.seq.as_ref()?;
        let mut at = 0usize;
        let mut out = Vec::with_capacity(layout.elems.len());
        for e in &layout.elems {
            let v = match self.view(at, &e.shape) {
                Ok(v) => v,
                Err(err) => return Some(Err(err)),
            };
            at += v.numel();
            out.push(Tensor {
                seq: e.seq.clone(),
                ..v
            });
        }
        Some(Ok(out))
    }

    /// A packed sequence or optional of copies of `elems` (all of type `dtype`), in a fresh heap
    /// buffer charged to `stats` (if any).
    pub fn packed(
        kind: SeqKind,
        dtype: DataType,
        elems: &[&Tensor],
        stats: Option<&Arc<MemStats>>,
    ) -> Result<Tensor, TensorError> {
        if let Some(e) = elems.iter().find(|e| e.dtype != dtype) {
            return Err(TensorError::Type {
                have: e.dtype,
                want: dtype,
            });
        }
        let (layout, total) = Tensor::seq_layout(kind, elems);
        let mut t = Tensor::zeros(dtype, &[total], stats)?;
        t.fill_packed(elems, layout)?;
        Ok(t)
    }

    /// Writes `elems`' bytes one after another from the start and makes this tensor the packed
    /// value they lay out.
    pub(crate) fn fill_packed(
        &mut self,
        elems: &[&Tensor],
        layout: SeqLayout,
    ) -> Result<(), TensorError> {
        let dst = self.bytes_mut()?;
        let mut at = 0;
        for e in elems {
            let b = e.bytes();
            let end = at + b.len();
            if end > dst.len() {
                return Err(TensorError::View {
                    offset: at,
                    want: b.len(),
                    have: dst.len(),
                });
            }
            dst[at..end].copy_from_slice(b);
            at = end;
        }
        self.seq = Some(Arc::new(layout));
        Ok(())
    }

    /// The layout of a packed value holding `elems`, in order (see [`Tensor::elements`]), and its
    /// total element count.
    pub fn seq_layout(kind: SeqKind, elems: &[&Tensor]) -> (SeqLayout, usize) {
        let total = elems.iter().map(|e| e.numel()).sum();
        let elems = elems
            .iter()
            .map(|e| SeqElem {
                shape: e.shape.clone(),
                seq: e.seq.clone(),
            })
            .collect();
        (SeqLayout { kind, elems }, total)
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
            // SAFETY: a writable arena tensor's range is reached only through that tensor (arena
            // invariant), and its `bytes_mut` borrows it mutably, so no `&mut` overlaps this slice.
            Data::Arena {
                arena, offset, len, ..
            } => unsafe { arena.range(*offset, *len) },
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
            Data::Arena {
                arena,
                offset,
                len,
                write,
            } => {
                write
                    .as_mut()
                    .and_then(Arc::get_mut)
                    .ok_or(TensorError::Shared)?;
                // SAFETY: this tensor holds the sole write handle, which the interpreter makes only
                // for the op producing the value planned at this range, while nothing else reaches
                // the range (arena invariant); clones and views share the handle and cannot write,
                // and `&mut self` excludes reads through this tensor.
                Ok(unsafe { arena.range_mut(*offset, *len) })
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
            seq: None,
            data: self.data.clone(),
        }
    }

    /// A zero-copy view of `shape` starting `offset_elems` elements in.
    pub fn view(&self, offset_elems: usize, shape: &[usize]) -> Result<Tensor, TensorError> {
        let es = elem_size(self.dtype)?;
        let want = elem_count(shape)?
            .checked_mul(es)
            .ok_or(TensorError::Alloc(AllocError(usize::MAX)))?;
        let off = offset_elems
            .checked_mul(es)
            .ok_or(TensorError::Alloc(AllocError(usize::MAX)))?;
        // The length alone, without borrowing the bytes (other threads may be writing other
        // parts of an arena range while a view of one part is taken).
        let have = match &self.data {
            Data::Buf { len, .. } | Data::Arena { len, .. } => *len,
            Data::Bytes(b) => b.len(),
        };
        if off.checked_add(want).is_none_or(|end| end > have) {
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
            Data::Arena {
                arena,
                offset,
                write,
                ..
            } => Data::Arena {
                arena: arena.clone(),
                offset: offset + off,
                len: want,
                write: write.clone(),
            },
            Data::Bytes(b) => Data::Bytes(b.slice(off..off + want)),
        };
        Ok(Tensor {
            dtype: self.dtype,
            shape: shape.to_vec(),
            seq: None,
            data,
        })
    }

    /// Whether this tensor's bytes live in a counted buffer or arena (not borrowed model bytes).
    pub fn is_owned_buffer(&self) -> bool {
        matches!(self.data, Data::Buf { .. } | Data::Arena { .. })
    }

    /// Whether `self` and `other` share the same underlying buffer.
    pub fn shares_buffer(&self, other: &Tensor) -> bool {
        match (&self.data, &other.data) {
            (Data::Buf { buf: a, .. }, Data::Buf { buf: b, .. }) => Arc::ptr_eq(a, b),
            (
                Data::Arena {
                    arena: a,
                    offset: oa,
                    len: la,
                    ..
                },
                Data::Arena {
                    arena: b,
                    offset: ob,
                    len: lb,
                    ..
                },
            ) => Arc::ptr_eq(a, b) && oa < &(ob + lb) && ob < &(oa + la),
            _ => false,
        }
    }

    /// Converts to f32 values (f16/bf16/f64/ints/bool and the float8/float4/packed-int types), for
    /// comparisons and reduced-precision compute.
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
            d => match narrow_to_f32(d) {
                Some(f) => (0..self.numel()).map(|i| f(self.bytes(), i)).collect(),
                None => return Err(TensorError::Unsupported(d)),
            },
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

/// Element `i` of the bytes of a float8, float4 or packed-integer tensor as f32 (exact).
type NarrowRead = fn(&[u8], usize) -> f32;

/// The reader of [`NarrowRead`] for the narrow types (see [`crate::kernels::minifloat`]).
fn narrow_to_f32(d: DataType) -> Option<NarrowRead> {
    use crate::kernels::minifloat as m;
    Some(match d {
        DataType::F8E4M3FN => |b, i| m::E4M3FN.decode(b[i]),
        DataType::F8E4M3FNUZ => |b, i| m::E4M3FNUZ.decode(b[i]),
        DataType::F8E5M2 => |b, i| m::E5M2.decode(b[i]),
        DataType::F8E5M2FNUZ => |b, i| m::E5M2FNUZ.decode(b[i]),
        DataType::F8E8M0 => |b, i| m::e8m0_decode(b[i]),
        DataType::F4E2M1 => |b, i| m::E2M1.decode(m::packed_get(b, 4, i)),
        DataType::I4 => |b, i| m::INT4.value(m::packed_get(b, 4, i)) as f32,
        DataType::U4 => |b, i| m::UINT4.value(m::packed_get(b, 4, i)) as f32,
        DataType::I2 => |b, i| m::INT2.value(m::packed_get(b, 2, i)) as f32,
        DataType::U2 => |b, i| m::UINT2.value(m::packed_get(b, 2, i)) as f32,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_byte_tensors_are_packed() {
        let s = MemStats::new();
        let t = Tensor::zeros(DataType::I4, &[3], Some(&s)).unwrap();
        assert_eq!(t.bytes().len(), 2);
        assert_eq!(s.current(), 2);
        let b = Bytes::from(vec![0b11_10_01_00u8, 0b01]);
        let t = Tensor::from_bytes(DataType::I2, &[5], b, None).unwrap();
        assert_eq!(t.to_f32_vec().unwrap(), [0.0, 1.0, -2.0, -1.0, 1.0]);
        assert!(Tensor::from_bytes(DataType::U4, &[5], Bytes::from(vec![0u8; 2]), None).is_err());
        assert!(t.view(0, &[4]).is_err());
        let f8 = Tensor::from_bytes(
            DataType::F8E4M3FN,
            &[2],
            Bytes::from(vec![0x38u8, 0x7F]),
            None,
        )
        .unwrap();
        let v = f8.to_f32_vec().unwrap();
        assert!(v[0] == 1.0 && v[1].is_nan());
    }

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
