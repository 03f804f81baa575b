//! Random draws: `RandomUniform`, `RandomUniformLike`, `RandomNormal`, `RandomNormalLike`,
//! `Bernoulli`, `Multinomial`. Element `i` of an output is a pure function of the node's seed and
//! `i` ([`crate::kernels::random`]), so any slice and any thread count give the same values. No
//! scratch: probabilities and logits are read in place.

use half::{bf16, f16};
use memplan_ir::DataType;
use rayon::prelude::*;

use super::{fail, req, unsupported, OpCtx, OpFail, OpFn};
use crate::kernels::random::{seed_for, Stream};
use crate::tensor::Tensor;

pub const OPS: &[(&str, OpFn)] = &[
    ("RandomUniform", random_uniform),
    ("RandomUniformLike", random_uniform),
    ("RandomNormal", random_normal),
    ("RandomNormalLike", random_normal),
    ("Bernoulli", bernoulli),
    ("Multinomial", multinomial),
];

/// Elements per parallel task.
const TASK: usize = 1 << 14;

/// The stream of `ctx`'s node: its `seed` attribute (float for the Random* ops, int for `Dropout`),
/// else the documented default mixed with the node's name.
pub fn node_stream(ctx: &OpCtx) -> Result<Stream, OpFail> {
    use memplan_ir::graph::AttrValue;
    let seed = match ctx.node.attr("seed") {
        None => None,
        Some(AttrValue::Float(f)) => Some(u64::from(f.to_bits())),
        Some(AttrValue::Int(i)) => Some(*i as u64),
        Some(o) => {
            return fail(format!(
                "attribute 'seed' must be FLOAT or INT, got {}",
                o.kind_name()
            ))
        }
    };
    Ok(seed_for(seed, &ctx.node.name))
}

/// Fills `out` in parallel: element `i` is `f(i)`.
pub fn fill<T: Send>(out: &mut [T], f: impl Fn(u64) -> T + Sync) {
    out.par_chunks_mut(TASK).enumerate().for_each(|(c, chunk)| {
        let base = (c * TASK) as u64;
        for (j, o) in chunk.iter_mut().enumerate() {
            *o = f(base + j as u64);
        }
    });
}

/// Fills a float tensor: element `i` is `f(i, bits)` rounded to its type, where `bits` is the
/// type's significand precision (for uniform draws exact in it).
fn fill_float(out: &mut Tensor, f: impl Fn(u64, u32) -> f64 + Sync) -> Result<(), OpFail> {
    match out.dtype {
        DataType::F32 => fill(out.data_mut::<f32>()?, |i| f(i, 24) as f32),
        DataType::F64 => fill(out.data_mut::<f64>()?, |i| f(i, 53)),
        DataType::F16 => fill(out.data_mut::<f16>()?, |i| f16::from_f64(f(i, 11))),
        DataType::BF16 => fill(out.data_mut::<bf16>()?, |i| bf16::from_f64(f(i, 8))),
        d => return unsupported(format!("random values of type {d}")),
    }
    Ok(())
}

/// The output type: the `dtype` attribute, else the input's (the *Like ops), else float.
fn out_dtype(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<DataType, OpFail> {
    match ctx.dtype("dtype")? {
        Some(t) => Ok(t),
        None => Ok(super::opt(inputs, 0).map_or(DataType::F32, |t| t.dtype)),
    }
}

/// The output shape: the input's (the *Like ops), else the `shape` attribute.
fn out_shape(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<usize>, OpFail> {
    if let Some(t) = super::opt(inputs, 0) {
        return Ok(t.shape.clone());
    }
    let Some(s) = ctx.ints("shape")? else {
        return fail("attribute 'shape' is required");
    };
    s.iter()
        .map(|&d| usize::try_from(d).map_err(|_| OpFail::Invalid(format!("shape has dim {d}"))))
        .collect()
}

fn random_uniform(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (low, high) = (
        ctx.float("low", 0.0)? as f64,
        ctx.float("high", 1.0)? as f64,
    );
    let s = node_stream(ctx)?;
    let mut out = ctx.alloc_for_overwrite(out_dtype(ctx, inputs)?, &out_shape(ctx, inputs)?)?;
    fill_float(&mut out, |i, bits| low + (high - low) * s.uniform(i, bits))?;
    Ok(vec![out])
}

fn random_normal(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (mean, scale) = (
        ctx.float("mean", 0.0)? as f64,
        ctx.float("scale", 1.0)? as f64,
    );
    let s = node_stream(ctx)?;
    let mut out = ctx.alloc_for_overwrite(out_dtype(ctx, inputs)?, &out_shape(ctx, inputs)?)?;
    fill_float(&mut out, |i, _| mean + scale * s.normal(i))?;
    Ok(vec![out])
}

/// A float tensor's elements read as f64, whatever its float type.
#[derive(Clone, Copy)]
pub enum Floats<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
}

impl<'a> Floats<'a> {
    pub fn of(t: &'a Tensor) -> Result<Floats<'a>, OpFail> {
        Ok(match t.dtype {
            DataType::F32 => Floats::F32(t.data()?),
            DataType::F64 => Floats::F64(t.data()?),
            DataType::F16 => Floats::F16(t.data()?),
            DataType::BF16 => Floats::BF16(t.data()?),
            d => return unsupported(format!("{d} where a float type is expected")),
        })
    }

    pub fn get(&self, i: usize) -> f64 {
        match self {
            Floats::F32(v) => v[i] as f64,
            Floats::F64(v) => v[i],
            Floats::F16(v) => v[i].to_f64(),
            Floats::BF16(v) => v[i].to_f64(),
        }
    }
}

/// Element `i` is 1 with probability `p[i]` (a 53-bit uniform draw below it), else 0.
fn bernoulli(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let p = Floats::of(x)?;
    let s = node_stream(ctx)?;
    let mut out = ctx.alloc_for_overwrite(out_dtype(ctx, inputs)?, &x.shape)?;
    let hit = |i: u64| s.uniform(i, 53) < p.get(i as usize);
    macro_rules! ints {
        ($($d:ident => $t:ty),*) => {
            match out.dtype {
                DataType::F32 => fill(out.data_mut::<f32>()?, |i| hit(i) as u8 as f32),
                DataType::F64 => fill(out.data_mut::<f64>()?, |i| hit(i) as u8 as f64),
                DataType::F16 => fill(out.data_mut::<f16>()?, |i| f16::from_f32(hit(i) as u8 as f32)),
                DataType::BF16 => {
                    fill(out.data_mut::<bf16>()?, |i| bf16::from_f32(hit(i) as u8 as f32))
                }
                DataType::Bool => fill(super::raw_mut::<u8>(&mut out)?, |i| hit(i) as u8),
                $(DataType::$d => fill(out.data_mut::<$t>()?, |i| hit(i) as $t),)*
                d => return unsupported(format!("Bernoulli output of type {d}")),
            }
        };
    }
    ints!(I8 => i8, U8 => u8, I16 => i16, U16 => u16, I32 => i32, U32 => u32, I64 => i64, U64 => u64);
    Ok(vec![out])
}

/// Sample `j` of row `b` (element `b * samples + j`) is the first class whose cumulative
/// `exp(x - max)` exceeds a uniform draw times the row's total; the row is read twice per sample,
/// so nothing is cached between elements.
fn multinomial(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let [batch, classes] = x.shape[..] else {
        return fail(format!(
            "input must be [batch, classes], has shape {:?}",
            x.shape
        ));
    };
    if classes == 0 {
        return fail("input has no classes");
    }
    let samples = ctx.int("sample_size", 1)?;
    let Ok(samples @ 1..) = usize::try_from(samples) else {
        return fail(format!(
            "attribute 'sample_size' is {samples}, must be >= 1"
        ));
    };
    let dtype = match ctx.int("dtype", DataType::I32 as i64)? {
        6 => DataType::I32,
        7 => DataType::I64,
        c => {
            return fail(format!(
                "attribute 'dtype' is {c}, must be int32 (6) or int64 (7)"
            ))
        }
    };
    let p = Floats::of(x)?;
    let s = node_stream(ctx)?;
    let draw = |i: u64| -> usize {
        let row = i as usize / samples * classes;
        let max = (row..row + classes)
            .map(|k| p.get(k))
            .fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = (row..row + classes).map(|k| (p.get(k) - max).exp()).sum();
        let target = s.uniform(i, 53) * total;
        let mut cum = 0.0;
        let mut last = 0;
        for k in 0..classes {
            let w = (p.get(row + k) - max).exp();
            if w > 0.0 {
                last = k;
            }
            cum += w;
            if cum > target {
                return k;
            }
        }
        last
    };
    let mut out = ctx.alloc_for_overwrite(dtype, &[batch, samples])?;
    match dtype {
        DataType::I32 => fill(out.data_mut::<i32>()?, |i| draw(i) as i32),
        _ => fill(out.data_mut::<i64>()?, |i| draw(i) as i64),
    }
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::*;
    use memplan_ir::graph::AttrValue;

    #[test]
    fn slices_equal_the_same_slice_drawn_alone() {
        // A chunk of an output (any start, any length, any task split) equals the full draw's slice.
        let s = Stream::new(99);
        let mut full = vec![0f32; 50_000];
        fill(&mut full, |i| s.uniform(i, 24) as f32);
        let (a, b) = (12_345, 40_001);
        let mut part = vec![0f32; b - a];
        for (j, o) in part.iter_mut().enumerate() {
            *o = s.uniform((a + j) as u64, 24) as f32;
        }
        assert_eq!(&full[a..b], &part[..]);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let mut one = vec![0f32; 50_000];
        pool.install(|| fill(&mut one, |i| s.uniform(i, 24) as f32));
        assert_eq!(full, one);
    }

    fn run1(op: &str, attrs: Vec<(&str, AttrValue)>, inputs: Vec<Tensor>) -> Tensor {
        let ins: Vec<Option<&Tensor>> = inputs.iter().map(Some).collect();
        run_op(op, &attrs, &ins, 1).unwrap().remove(0)
    }

    #[test]
    fn uniform_range_mean_and_seed() {
        let attrs = || {
            vec![
                ("shape", AttrValue::Ints(vec![200, 500])),
                ("low", AttrValue::Float(-2.0)),
                ("high", AttrValue::Float(6.0)),
                ("seed", AttrValue::Float(5.0)),
            ]
        };
        let t = run1("RandomUniform", attrs(), vec![]);
        assert_eq!(t.shape, vec![200, 500]);
        let v = t.data::<f32>().unwrap();
        assert!(v.iter().all(|&x| (-2.0..6.0).contains(&x)));
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        // Standard error 8 / sqrt(12 * 1e5) ~ 0.0073.
        assert!((mean - 2.0).abs() < 0.04, "mean {mean}");
        // Same seed, same values; the *Like form over an input of that shape draws the same.
        assert_eq!(
            run1("RandomUniform", attrs(), vec![])
                .data::<f32>()
                .unwrap(),
            v
        );
        let like = run1(
            "RandomUniformLike",
            vec![
                ("low", AttrValue::Float(-2.0)),
                ("high", AttrValue::Float(6.0)),
                ("seed", AttrValue::Float(5.0)),
            ],
            vec![Tensor::from_vec(&[200, 500], &vec![0f32; 100_000], None).unwrap()],
        );
        assert_eq!(like.data::<f32>().unwrap(), v);
    }

    #[test]
    fn normal_moments_in_half_precision() {
        let t = run1(
            "RandomNormalLike",
            vec![
                ("mean", AttrValue::Float(3.0)),
                ("scale", AttrValue::Float(0.5)),
            ],
            vec![Tensor::from_vec(&[100_000], &vec![f16::ZERO; 100_000], None).unwrap()],
        );
        assert_eq!(t.dtype, DataType::F16);
        let v: Vec<f64> = t
            .data::<f16>()
            .unwrap()
            .iter()
            .map(|x| x.to_f64())
            .collect();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!((mean - 3.0).abs() < 0.01, "mean {mean}");
        assert!((var - 0.25).abs() < 0.01, "variance {var}");
    }

    #[test]
    fn bernoulli_rate_follows_each_probability() {
        let n = 40_000;
        let p: Vec<f64> = (0..n).map(|i| [0.0, 0.1, 0.5, 1.0][i % 4]).collect();
        let t = run1(
            "Bernoulli",
            vec![("dtype", AttrValue::Int(7))],
            vec![Tensor::from_vec(&[n], &p, None).unwrap()],
        );
        let v = t.data::<i64>().unwrap();
        for (k, &pk) in [0.0, 0.1, 0.5, 1.0].iter().enumerate() {
            let hits = v.iter().skip(k).step_by(4).filter(|&&x| x == 1).count();
            let rate = hits as f64 / (n / 4) as f64;
            // Standard error at most sqrt(0.25 / 1e4) = 0.005.
            assert!((rate - pk).abs() < 0.025, "p {pk}: rate {rate}");
        }
        assert!(v.iter().all(|&x| x == 0 || x == 1));
    }

    #[test]
    fn multinomial_frequencies_follow_the_softmax() {
        let probs = [0.1f32, 0.2, 0.3, 0.4];
        let logits: Vec<f32> = probs.iter().flat_map(|&q| [q.ln(), q.ln()]).collect();
        // Two rows: the probabilities, and the same probabilities with a large common offset.
        let mut x: Vec<f32> = probs.iter().map(|q| q.ln()).collect();
        x.extend(probs.iter().map(|q| q.ln() + 500.0));
        assert_eq!(logits.len(), 8);
        let t = run1(
            "Multinomial",
            vec![
                ("sample_size", AttrValue::Int(20_000)),
                ("seed", AttrValue::Float(1.0)),
            ],
            vec![Tensor::from_vec(&[2, 4], &x, None).unwrap()],
        );
        assert_eq!((t.dtype, t.shape.clone()), (DataType::I32, vec![2, 20_000]));
        let v = t.data::<i32>().unwrap();
        for row in v.chunks(20_000) {
            for (k, &q) in probs.iter().enumerate() {
                let f = row.iter().filter(|&&c| c == k as i32).count() as f64 / 20_000.0;
                // Standard error at most sqrt(0.25 / 2e4) ~ 0.0035.
                assert!((f - q as f64).abs() < 0.015, "class {k}: {f} vs {q}");
            }
        }
    }

    #[test]
    fn bad_attributes_are_errors() {
        assert!(run_op("RandomUniform", &[], &[], 1).is_err());
        let x = t_f32(&[1, 2], &[0.0, 0.0]);
        assert!(run_op(
            "Multinomial",
            &[("sample_size", AttrValue::Int(0))],
            &[Some(&x)],
            1
        )
        .is_err());
        assert!(run_op(
            "Multinomial",
            &[("dtype", AttrValue::Int(1))],
            &[Some(&x)],
            1
        )
        .is_err());
    }
}
