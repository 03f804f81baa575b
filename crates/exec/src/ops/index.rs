//! Indexing ops: Gather, GatherElements, GatherND, ScatterND, ScatterElements, TopK, NonZero.
//!
//! Scratch (bytes): TopK `8 * shape[axis]` (one row's index permutation, counted). Int64 indices are
//! read in place; int32 ones are converted into `8 * |indices|` bytes, and GatherND/ScatterND/
//! ScatterElements hold `8 * (number of index tuples)` offsets, on the ordinary heap (not charged to
//! the run's tensor memory). Others: none.
//!
//! ScatterND and ScatterElements modify a copy of their data ([`OVERWRITE`]), so a plan may run them
//! over the data's own buffer.

use half::{bf16, f16};
use memplan_ir::DataType;

use super::{
    axis, cast_mut, copy_then, fail, raw, raw_mut, req, scalar_i64, unsupported, OpCtx, OpFail,
    OpFn, OverwriteFn,
};
use crate::kernels::index as ix;
use crate::kernels::topk::topk;
use crate::tensor::{elem_size, Tensor};

/// Ops whose output 0 is input 0 modified (see [`super::OverwriteFn`]).
pub const OVERWRITE: &[(&str, OverwriteFn)] = &[
    ("ScatterND", scatter_nd_over),
    ("ScatterElements", scatter_elements_over),
];

pub const OPS: &[(&str, OpFn)] = &[
    ("Gather", gather),
    ("GatherElements", gather_elements),
    ("GatherND", gather_nd),
    ("ScatterND", scatter_nd),
    ("ScatterElements", scatter_elements),
    ("Scatter", scatter_elements),
    ("TopK", topk_op),
    ("NonZero", nonzero),
];

/// Index values as i64: borrowed for i64 tensors (no copy that grows with the indices), converted
/// for i32.
fn indices(t: &Tensor) -> Result<std::borrow::Cow<'_, [i64]>, OpFail> {
    match t.dtype {
        DataType::I64 => Ok(std::borrow::Cow::Borrowed(t.data::<i64>()?)),
        DataType::I32 => Ok(std::borrow::Cow::Owned(t.to_i64_vec()?)),
        d => fail(format!("indices must be int32 or int64, got {d}")),
    }
}

fn gather(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, it) = (req(inputs, 0)?, req(inputs, 1)?);
    let a = axis(ctx.int("axis", 0)?, x.rank())?;
    let idx = indices(it)?;
    let mut oshape = x.shape[..a].to_vec();
    oshape.extend(&it.shape);
    oshape.extend(&x.shape[a + 1..]);
    let mut out = ctx.alloc(x.dtype, &oshape)?;
    by_size!(elem_size(x.dtype)?, T => ix::gather(raw::<T>(x)?, &x.shape, a, &idx, raw_mut::<T>(&mut out)?)?);
    Ok(vec![out])
}

fn gather_elements(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, it) = (req(inputs, 0)?, req(inputs, 1)?);
    let a = axis(ctx.int("axis", 0)?, x.rank())?;
    let idx = indices(it)?;
    let mut out = ctx.alloc(x.dtype, &it.shape)?;
    by_size!(elem_size(x.dtype)?, T => ix::gather_elements(raw::<T>(x)?, &x.shape, a, &idx, &it.shape, raw_mut::<T>(&mut out)?)?);
    Ok(vec![out])
}

fn gather_nd(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, it) = (req(inputs, 0)?, req(inputs, 1)?);
    let b = usize::try_from(ctx.int("batch_dims", 0)?)
        .map_err(|_| OpFail::Invalid("batch_dims < 0".into()))?;
    let idx = indices(it)?;
    let (offs, block) = ix::nd_offsets(&x.shape, &idx, &it.shape, b)?;
    let q = it.shape[it.rank() - 1];
    let mut oshape = it.shape[..it.rank() - 1].to_vec();
    oshape.extend(&x.shape[b + q..]);
    let mut out = ctx.alloc(x.dtype, &oshape)?;
    by_size!(elem_size(x.dtype)?, T => ix::gather_blocks(raw::<T>(x)?, &offs, block, raw_mut::<T>(&mut out)?)?);
    Ok(vec![out])
}

fn reduction(ctx: &OpCtx) -> Result<ix::ScatterReduce, OpFail> {
    Ok(match ctx.string("reduction")?.as_deref() {
        None | Some("none") => ix::ScatterReduce::None,
        Some("add") => ix::ScatterReduce::Add,
        Some("mul") => ix::ScatterReduce::Mul,
        Some("max") => ix::ScatterReduce::Max,
        Some("min") => ix::ScatterReduce::Min,
        Some(r) => return fail(format!("unknown reduction '{r}'")),
    })
}

/// Applies updates at element offsets with a reduction, over `out` (which holds the data).
fn scatter_apply(
    ctx: &OpCtx,
    x: &Tensor,
    upd: &Tensor,
    offs: &[usize],
    block: usize,
    out: &mut [u8],
) -> Result<(), OpFail> {
    if upd.dtype != x.dtype {
        return fail(format!("updates are {} but data is {}", upd.dtype, x.dtype));
    }
    let red = reduction(ctx)?;
    if red == ix::ScatterReduce::None {
        by_size!(elem_size(x.dtype)?, T => ix::scatter_blocks(cast_mut::<T>(out)?, offs, block, raw::<T>(upd)?, |_, v| v)?);
        return Ok(());
    }
    macro_rules! go {
        ($T:ty, $add:expr, $mul:expr) => {{
            let f: fn($T, $T) -> $T = match red {
                ix::ScatterReduce::Add => $add,
                ix::ScatterReduce::Mul => $mul,
                ix::ScatterReduce::Max => |a, b| if b > a { b } else { a },
                _ => |a, b| if b < a { b } else { a },
            };
            ix::scatter_blocks(cast_mut::<$T>(out)?, offs, block, upd.data::<$T>()?, f)?
        }};
    }
    match x.dtype {
        DataType::F32 => go!(f32, |a, b| a + b, |a, b| a * b),
        DataType::F64 => go!(f64, |a, b| a + b, |a, b| a * b),
        DataType::I32 => go!(i32, i32::wrapping_add, i32::wrapping_mul),
        DataType::I64 => go!(i64, i64::wrapping_add, i64::wrapping_mul),
        DataType::F16 => go!(
            f16,
            |a, b| f16::from_f32(a.to_f32() + b.to_f32()),
            |a, b| f16::from_f32(a.to_f32() * b.to_f32())
        ),
        DataType::BF16 => go!(
            bf16,
            |a, b| bf16::from_f32(a.to_f32() + b.to_f32()),
            |a, b| bf16::from_f32(a.to_f32() * b.to_f32())
        ),
        d => return unsupported(format!("scatter reduction on {d}")),
    }
    Ok(())
}

fn scatter_nd(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    copy_then(ctx, inputs, scatter_nd_over)
}

fn scatter_nd_over(ctx: &OpCtx, inputs: &[Option<&Tensor>], out: &mut [u8]) -> Result<(), OpFail> {
    let (x, it, upd) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    let idx = indices(it)?;
    let (offs, block) = ix::nd_offsets(&x.shape, &idx, &it.shape, 0)?;
    let q = it.shape[it.rank() - 1];
    let mut want = it.shape[..it.rank() - 1].to_vec();
    want.extend(&x.shape[q..]);
    if upd.shape != want {
        return fail(format!(
            "ScatterND updates {:?} should be {want:?}",
            upd.shape
        ));
    }
    scatter_apply(ctx, x, upd, &offs, block, out)
}

fn scatter_elements(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    copy_then(ctx, inputs, scatter_elements_over)
}

fn scatter_elements_over(
    ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
    out: &mut [u8],
) -> Result<(), OpFail> {
    let (x, it, upd) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    if upd.shape != it.shape {
        return fail(format!(
            "ScatterElements updates {:?} differ from indices {:?}",
            upd.shape, it.shape
        ));
    }
    let a = axis(ctx.int("axis", 0)?, x.rank())?;
    let offs = ix::elements_offsets(&x.shape, a, &indices(it)?, &it.shape)?;
    scatter_apply(ctx, x, upd, &offs, 1, out)
}

fn topk_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let k = if ctx.opset < 10 {
        ctx.int("k", 0)?
    } else {
        scalar_i64(req(inputs, 1)?, "TopK K")?
    };
    let k = usize::try_from(k).map_err(|_| OpFail::Invalid(format!("TopK k = {k} is negative")))?;
    let a = axis(ctx.int("axis", -1)?, x.rank())?;
    let largest = ctx.int("largest", 1)? != 0;
    if k > x.shape[a] {
        return fail(format!(
            "TopK k = {k} exceeds the axis length {}",
            x.shape[a]
        ));
    }
    let mut oshape = x.shape.clone();
    oshape[a] = k;
    let mut vals = ctx.alloc(x.dtype, &oshape)?;
    let mut idx = ctx.alloc(DataType::I64, &oshape)?;
    let mut scratch = ctx.scratch::<u64>(x.shape[a])?;
    let s: &mut [usize] = bytemuck::cast_slice_mut(scratch.as_mut_slice());
    macro_rules! go {
        ($T:ty, $nan:expr) => {
            topk::<$T>(
                x.data()?,
                &x.shape,
                a,
                k,
                largest,
                $nan,
                vals.data_mut()?,
                idx.data_mut()?,
                s,
            )?
        };
    }
    match x.dtype {
        DataType::F32 => go!(f32, |v: &f32| v.is_nan()),
        DataType::F64 => go!(f64, |v: &f64| v.is_nan()),
        DataType::F16 => go!(f16, |v: &f16| v.is_nan()),
        DataType::BF16 => go!(bf16, |v: &bf16| v.is_nan()),
        DataType::I32 => go!(i32, |_: &i32| false),
        DataType::I64 => go!(i64, |_: &i64| false),
        DataType::U8 => go!(u8, |_: &u8| false),
        DataType::I8 => go!(i8, |_: &i8| false),
        DataType::I16 => go!(i16, |_: &i16| false),
        DataType::U16 => go!(u16, |_: &u16| false),
        DataType::U32 => go!(u32, |_: &u32| false),
        DataType::U64 => go!(u64, |_: &u64| false),
        d => return unsupported(format!("TopK on {d}")),
    }
    Ok(vec![vals, idx])
}

fn nonzero(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    // Floats compare as numbers (-0.0 is zero); everything else by its bits.
    let (n, coords) = match x.dtype {
        DataType::F32 => ix::nonzero(x.data::<f32>()?, &x.shape)?,
        DataType::F64 => ix::nonzero(x.data::<f64>()?, &x.shape)?,
        DataType::F16 => ix::nonzero(x.data::<f16>()?, &x.shape)?,
        DataType::BF16 => ix::nonzero(x.data::<bf16>()?, &x.shape)?,
        d => by_size!(elem_size(d)?, T => ix::nonzero(raw::<T>(x)?, &x.shape)?),
    };
    Ok(vec![ctx.from_vec::<i64>(&[x.rank().max(1), n], &coords)?])
}

#[cfg(test)]
mod tests {
    use crate::ops::testutil::*;
    use memplan_ir::graph::AttrValue;
    use proptest::prelude::*;

    #[test]
    fn gather_and_topk_ops() {
        let x = t_f32(&[3, 2], &[1., 2., 3., 4., 5., 6.]);
        let o = run_op(
            "Gather",
            &[],
            &[Some(&x), Some(&t_i64(&[2, 1], &[-1, 0]))],
            1,
        )
        .unwrap();
        assert_eq!(o[0].shape, [2, 1, 2]);
        assert_eq!(o[0].data::<f32>().unwrap(), &[5., 6., 1., 2.]);
        assert!(run_op("Gather", &[], &[Some(&x), Some(&t_i64(&[1], &[3]))], 1).is_err());
        let o = run_op(
            "TopK",
            &[],
            &[
                Some(&t_f32(&[4], &[1., 4., 4., 2.])),
                Some(&t_i64(&[1], &[2])),
            ],
            2,
        )
        .unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[4., 4.]);
        assert_eq!(o[1].data::<i64>().unwrap(), &[1, 2]);
        let o = run_op(
            "TopK",
            &[("axis", AttrValue::Int(0)), ("largest", AttrValue::Int(0))],
            &[Some(&x), Some(&t_i64(&[1], &[1]))],
            2,
        )
        .unwrap();
        assert_eq!(o[1].data::<i64>().unwrap(), &[0, 0]);
        let o = run_op(
            "GatherND",
            &[],
            &[Some(&x), Some(&t_i64(&[2, 2], &[2, 1, 0, 0]))],
            1,
        )
        .unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[6., 1.]);
        let o = run_op(
            "GatherElements",
            &[("axis", AttrValue::Int(1))],
            &[Some(&x), Some(&t_i64(&[3, 1], &[1, 0, 1]))],
            1,
        )
        .unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[2., 3., 6.]);
        let o = run_op(
            "ScatterND",
            &[("reduction", AttrValue::String(b"add".to_vec()))],
            &[
                Some(&x),
                Some(&t_i64(&[2, 1], &[0, 0])),
                Some(&t_f32(&[2, 2], &[1., 1., 1., 1.])),
            ],
            1,
        )
        .unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[3., 4., 3., 4., 5., 6.]);
        let o = run_op(
            "ScatterElements",
            &[("axis", AttrValue::Int(1))],
            &[
                Some(&x),
                Some(&t_i64(&[1, 1], &[1])),
                Some(&t_f32(&[1, 1], &[9.])),
            ],
            1,
        )
        .unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[1., 9., 3., 4., 5., 6.]);
        let o = run_op("NonZero", &[], &[Some(&t_f32(&[3], &[0., -0., 2.]))], 1).unwrap();
        assert_eq!(o[0].data::<i64>().unwrap(), &[2]);
    }

    proptest! {
        #[test]
        fn index_chunk_identity(
            rows in 1usize..6, n in 1usize..30, k_pick in any::<usize>(), seed in any::<u64>(),
            cuts in prop::collection::vec(any::<usize>(), 0..4),
        ) {
            // Few distinct values so that ties are common.
            let v: Vec<f32> = rand_f32(rows * n, seed).iter().map(|x| (x * 2.0).round()).collect();
            let x = t_f32(&[rows, n], &v);
            let k = t_i64(&[1], &[(k_pick % n + 1) as i64]);
            check_chunks("TopK", &[], &[&x, &k], &[Some(0), None], 0, &cuts).unwrap();
            let idx = t_i64(&[3], &[0, (n - 1) as i64, -1]);
            check_chunks("Gather", &[("axis", AttrValue::Int(1))], &[&x, &idx], &[Some(0), None], 0, &cuts).unwrap();
        }
    }
}
