//! Recurrent ops: `RNN`, `GRU`, `LSTM` (f32, f64, f16, bf16; computed in f64).
//!
//! Batch rows do not interact, so each (direction, row) pair runs its whole sequence on its own:
//! forward over times `0..len`, reverse over `len-1..=0`, `len` the row's `sequence_lens` entry
//! (the whole sequence without one). Y is zero at times past `len`; `Y_h`/`Y_c` are the states
//! after the row's last step. Every dot product runs in index order, so each output element is
//! computed the same way whatever the thread count.
//!
//! Scratch: one f64 buffer of `k * hidden` elements for the whole node (the row's states and gate
//! pre-activations; `k` from `memplan_ir::ops::recurrent::scratch_per_hidden`).

use half::{bf16, f16};
use memplan_ir::ops::recurrent::{directions, gates, scratch_per_hidden};
use memplan_ir::DataType;

use super::{fail, opt, req, unsupported, OpCtx, OpFail, OpFn};
use crate::tensor::{Element, Tensor};

pub const OPS: &[(&str, OpFn)] = &[("RNN", recurrent), ("GRU", recurrent), ("LSTM", recurrent)];

/// An activation function with its parameters.
#[derive(Clone, Copy, Debug)]
enum Act {
    Relu,
    Tanh,
    Sigmoid,
    Affine(f64, f64),
    LeakyRelu(f64),
    ThresholdedRelu(f64),
    ScaledTanh(f64, f64),
    HardSigmoid(f64, f64),
    Elu(f64),
    Softsign,
    Softplus,
}

impl Act {
    fn parse(name: &str, alpha: Option<f64>, beta: Option<f64>) -> Result<Act, OpFail> {
        let a = |d: f64| alpha.unwrap_or(d);
        let b = |d: f64| beta.unwrap_or(d);
        Ok(match name.to_ascii_lowercase().as_str() {
            "relu" => Act::Relu,
            "tanh" => Act::Tanh,
            "sigmoid" => Act::Sigmoid,
            "affine" => Act::Affine(a(1.0), b(0.0)),
            "leakyrelu" => Act::LeakyRelu(a(0.01)),
            "thresholdedrelu" => Act::ThresholdedRelu(a(1.0)),
            "scaledtanh" => Act::ScaledTanh(a(1.0), b(1.0)),
            "hardsigmoid" => Act::HardSigmoid(a(0.2), b(0.5)),
            "elu" => Act::Elu(a(1.0)),
            "softsign" => Act::Softsign,
            "softplus" => Act::Softplus,
            _ => return fail(format!("activation '{name}' is not a known activation")),
        })
    }

    fn apply(self, x: f64) -> f64 {
        match self {
            Act::Relu => x.max(0.0),
            Act::Tanh => x.tanh(),
            Act::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Act::Affine(a, b) => a * x + b,
            Act::LeakyRelu(a) => {
                if x >= 0.0 {
                    x
                } else {
                    a * x
                }
            }
            Act::ThresholdedRelu(a) => {
                if x > a {
                    x
                } else {
                    0.0
                }
            }
            Act::ScaledTanh(a, b) => a * (b * x).tanh(),
            Act::HardSigmoid(a, b) => (a * x + b).clamp(0.0, 1.0),
            Act::Elu(a) => {
                if x >= 0.0 {
                    x
                } else {
                    a * (x.exp() - 1.0)
                }
            }
            Act::Softsign => x / (1.0 + x.abs()),
            Act::Softplus => (1.0 + x.exp()).ln(),
        }
    }
}

/// Everything a row's run needs besides the tensors.
struct Cfg {
    op: Kind,
    dirs: usize,
    reverse_only: bool,
    seq: usize,
    batch: usize,
    input: usize,
    hidden: usize,
    layout1: bool,
    /// Activations per direction (`[f]` for RNN, `[f, g]` for GRU, `[f, g, h]` for LSTM).
    acts: Vec<Vec<Act>>,
    clip: Option<f64>,
    input_forget: bool,
    linear_before_reset: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rnn,
    Gru,
    Lstm,
}

fn recurrent(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let w = req(inputs, 1)?;
    let r = req(inputs, 2)?;
    let op = ctx.node.op.as_str();
    let kind = match op {
        "LSTM" => Kind::Lstm,
        "GRU" => Kind::Gru,
        _ => Kind::Rnn,
    };
    let g = gates(op);
    if x.shape.len() != 3 || w.shape.len() != 3 || r.shape.len() != 3 {
        return fail(format!(
            "X, W and R must have rank 3, got {:?}, {:?} and {:?}",
            x.shape, w.shape, r.shape
        ));
    }
    let dir = ctx.string("direction")?.unwrap_or_else(|| "forward".into());
    let Some(dirs) = directions(&dir) else {
        return fail(format!("direction '{dir}' is not a known direction"));
    };
    let layout1 = match ctx.int("layout", 0)? {
        0 => false,
        1 => true,
        l => return fail(format!("layout {l} is not 0 or 1")),
    };
    let hidden = match ctx.opt_int("hidden_size")? {
        Some(h) if h >= 1 => h as usize,
        Some(h) => return fail(format!("hidden_size {h} is not >= 1")),
        None => r.shape[2],
    };
    let (seq, batch, input) = if layout1 {
        (x.shape[1], x.shape[0], x.shape[2])
    } else {
        (x.shape[0], x.shape[1], x.shape[2])
    };
    if w.shape != [dirs, g * hidden, input] || r.shape != [dirs, g * hidden, hidden] {
        return fail(format!(
            "W {:?} and R {:?} must be [{dirs}, {}, {input}] and [{dirs}, {}, {hidden}]",
            w.shape,
            r.shape,
            g * hidden,
            g * hidden
        ));
    }
    let state_shape = if layout1 {
        [batch, dirs, hidden]
    } else {
        [dirs, batch, hidden]
    };
    let check = |i: usize, what: &str, want: &[usize]| -> Result<(), OpFail> {
        match opt(inputs, i) {
            Some(t) if t.shape != want => {
                fail(format!("{what} is {:?}, expected {want:?}", t.shape))
            }
            Some(t) if t.dtype != x.dtype => {
                fail(format!("{what} is {}, X is {}", t.dtype, x.dtype))
            }
            _ => Ok(()),
        }
    };
    if w.dtype != x.dtype || r.dtype != x.dtype {
        return fail(format!(
            "X, W and R must share one type, got {}, {} and {}",
            x.dtype, w.dtype, r.dtype
        ));
    }
    check(3, "B", &[dirs, 2 * g * hidden])?;
    check(5, "initial_h", &state_shape)?;
    if kind == Kind::Lstm {
        check(6, "initial_c", &state_shape)?;
        check(7, "P", &[dirs, 3 * hidden])?;
    }
    let lens: Vec<usize> = match opt(inputs, 4) {
        None => vec![seq; batch],
        Some(t) => {
            let v = t.to_i64_vec()?;
            if v.len() != batch {
                return fail(format!(
                    "sequence_lens has {} entries, the batch is {batch}",
                    v.len()
                ));
            }
            v.into_iter()
                .map(|l| match usize::try_from(l) {
                    Ok(l) if l <= seq => Ok(l),
                    _ => fail(format!("sequence_lens entry {l} is not in 0..={seq}")),
                })
                .collect::<Result<_, _>>()?
        }
    };
    let names = ctx
        .node
        .attr("activations")
        .map(|_| -> Result<Vec<String>, OpFail> {
            match ctx.node.attr("activations") {
                Some(memplan_ir::graph::AttrValue::Strings(v)) => Ok(v
                    .iter()
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect()),
                _ => fail("attribute 'activations' must be STRINGS"),
            }
        })
        .transpose()?;
    let per_dir: &[&str] = match kind {
        Kind::Rnn => &["Tanh"],
        Kind::Gru => &["Sigmoid", "Tanh"],
        Kind::Lstm => &["Sigmoid", "Tanh", "Tanh"],
    };
    let names: Vec<String> = match names {
        Some(v) => v,
        None => (0..dirs)
            .flat_map(|_| per_dir.iter().map(|s| s.to_string()))
            .collect(),
    };
    if names.len() != per_dir.len() * dirs {
        return fail(format!(
            "activations has {} entries, {op} with {dirs} direction(s) needs {}",
            names.len(),
            per_dir.len() * dirs
        ));
    }
    let alpha = ctx.floats("activation_alpha")?.unwrap_or_default();
    let beta = ctx.floats("activation_beta")?.unwrap_or_default();
    let acts = (0..dirs)
        .map(|d| {
            (0..per_dir.len())
                .map(|k| {
                    let i = d * per_dir.len() + k;
                    Act::parse(
                        &names[i],
                        alpha.get(i).map(|&a| a as f64),
                        beta.get(i).map(|&b| b as f64),
                    )
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let clip = ctx.opt_float("clip")?.map(f64::from);
    if clip.is_some_and(|c| c.is_nan() || c < 0.0) {
        return fail("clip must be non-negative");
    }
    let cfg = Cfg {
        op: kind,
        dirs,
        reverse_only: dir == "reverse",
        seq,
        batch,
        input,
        hidden,
        layout1,
        acts,
        clip,
        input_forget: kind == Kind::Lstm && ctx.int("input_forget", 0)? != 0,
        linear_before_reset: kind == Kind::Gru && ctx.int("linear_before_reset", 0)? != 0,
    };
    let wanted = |slot: usize| ctx.node.outputs.get(slot).is_some_and(|o| o.is_some());
    let y_shape = if layout1 {
        [batch, seq, dirs, hidden]
    } else {
        [seq, dirs, batch, hidden]
    };
    let n_out = if kind == Kind::Lstm { 3 } else { 2 };
    let mut outs = Vec::with_capacity(n_out);
    for slot in 0..n_out {
        outs.push(if wanted(slot) {
            let shape: &[usize] = if slot == 0 { &y_shape } else { &state_shape };
            Some(ctx.alloc(x.dtype, shape)?)
        } else {
            None
        });
    }
    let mut scratch = ctx.scratch::<f64>(scratch_per_hidden(op) * hidden)?;
    macro_rules! go {
        ($t:ty, $from:expr) => {{
            let ins: Vec<Option<&[$t]>> = (0..8)
                .map(|i| match opt(inputs, i) {
                    Some(t) if i != 4 => t.data::<$t>().map(Some),
                    _ => Ok(None),
                })
                .collect::<Result<_, _>>()?;
            let mut data: Vec<Option<&mut [$t]>> = outs
                .iter_mut()
                .map(|o| o.as_mut().map(|t| t.data_mut::<$t>()).transpose())
                .collect::<Result<_, _>>()?;
            run::<$t>(&cfg, &ins, &lens, &mut data, scratch.as_mut_slice(), $from);
        }};
    }
    match x.dtype {
        DataType::F32 => go!(f32, |v: f64| v as f32),
        DataType::F64 => go!(f64, |v: f64| v),
        DataType::F16 => go!(f16, f16::from_f64),
        DataType::BF16 => go!(bf16, bf16::from_f64),
        d => return unsupported(format!("{op} on {d}")),
    }
    drop(scratch);
    outs.into_iter()
        .map(|o| match o {
            Some(t) => Ok(t),
            // An output the node does not ask for: an empty placeholder, never stored.
            None => Ok(Tensor::zeros(x.dtype, &[0], None)?),
        })
        .collect()
}

/// `a · b` in index order.
fn dot<T: Copy + Into<f64>>(a: &[f64], b: &[T]) -> f64 {
    a.iter().zip(b).fold(0.0, |s, (&x, &y)| s + x * y.into())
}

/// `a · b`, both of the tensor type, in index order.
fn dot_t<T: Copy + Into<f64>>(a: &[T], b: &[T]) -> f64 {
    a.iter()
        .zip(b)
        .fold(0.0, |s, (&x, &y)| s + x.into() * y.into())
}

/// Runs every (direction, row) pair. `ins`: X, W, R, B, (sequence_lens: unused), initial_h,
/// initial_c, P; `outs`: Y, Y_h, Y_c when asked for.
fn run<T: Element + Copy + Into<f64>>(
    cfg: &Cfg,
    ins: &[Option<&[T]>],
    lens: &[usize],
    outs: &mut [Option<&mut [T]>],
    scratch: &mut [f64],
    from: fn(f64) -> T,
) {
    let (h, inp, g) = (cfg.hidden, cfg.input, gates_of(cfg.op));
    let (x, w, r) = (
        ins[0].unwrap_or_default(),
        ins[1].unwrap_or_default(),
        ins[2].unwrap_or_default(),
    );
    let clip = |v: f64| match cfg.clip {
        Some(c) => v.clamp(-c, c),
        None => v,
    };
    for d in 0..cfg.dirs {
        let reverse = cfg.reverse_only || d == 1;
        let wd = &w[d * g * h * inp..(d + 1) * g * h * inp];
        let rd = &r[d * g * h * h..(d + 1) * g * h * h];
        let bias = |k: usize| -> f64 { ins[3].map_or(0.0, |b| b[d * 2 * g * h + k].into()) };
        let peep = |k: usize| -> f64 { ins[7].map_or(0.0, |p| p[d * 3 * h + k].into()) };
        let acts = &cfg.acts[d];
        for b in 0..cfg.batch {
            let state_at = if cfg.layout1 {
                (b * cfg.dirs + d) * h
            } else {
                (d * cfg.batch + b) * h
            };
            let (hs, rest) = scratch.split_at_mut(h);
            let (cs, gs) = if cfg.op == Kind::Lstm {
                rest.split_at_mut(h)
            } else {
                rest.split_at_mut(0)
            };
            for (j, v) in hs.iter_mut().enumerate() {
                *v = ins[5].map_or(0.0, |s| s[state_at + j].into());
            }
            for (j, v) in cs.iter_mut().enumerate() {
                *v = ins[6].map_or(0.0, |s| s[state_at + j].into());
            }
            let len = lens[b];
            for s in 0..len {
                let t = if reverse { len - 1 - s } else { s };
                let xt_at = if cfg.layout1 {
                    (b * cfg.seq + t) * inp
                } else {
                    (t * cfg.batch + b) * inp
                };
                let xt = &x[xt_at..xt_at + inp];
                let pre = |k: usize, hs: &[f64]| -> f64 {
                    bias(k)
                        + bias(g * h + k)
                        + dot_t(xt, &wd[k * inp..(k + 1) * inp])
                        + dot(hs, &rd[k * h..(k + 1) * h])
                };
                match cfg.op {
                    Kind::Rnn => {
                        for j in 0..h {
                            gs[j] = acts[0].apply(clip(pre(j, hs)));
                        }
                        hs.copy_from_slice(&gs[..h]);
                    }
                    Kind::Lstm => {
                        // Gate blocks: i, o, f, c; peepholes: i, o, f.
                        for k in 0..4 * h {
                            gs[k] = pre(k, hs);
                        }
                        for j in 0..h {
                            let i = acts[0].apply(clip(gs[j] + peep(j) * cs[j]));
                            let f = if cfg.input_forget {
                                1.0 - i
                            } else {
                                acts[0].apply(clip(gs[2 * h + j] + peep(2 * h + j) * cs[j]))
                            };
                            let c = acts[1].apply(clip(gs[3 * h + j]));
                            cs[j] = f * cs[j] + i * c;
                            let o = acts[0].apply(clip(gs[h + j] + peep(h + j) * cs[j]));
                            hs[j] = o * acts[2].apply(cs[j]);
                        }
                    }
                    Kind::Gru => {
                        // Gate blocks: z, r, h; scratch after them: r ⊙ H.
                        let (gz, rh) = gs.split_at_mut(3 * h);
                        for k in 0..2 * h {
                            gz[k] = acts[0].apply(clip(pre(k, hs)));
                        }
                        if !cfg.linear_before_reset {
                            for (q, v) in rh.iter_mut().enumerate() {
                                *v = gz[h + q] * hs[q];
                            }
                        }
                        for j in 0..h {
                            let k = 2 * h + j;
                            let xw = bias(k) + dot_t(xt, &wd[k * inp..(k + 1) * inp]);
                            let rec = bias(g * h + k);
                            let v = if cfg.linear_before_reset {
                                xw + gz[h + j] * (dot(hs, &rd[k * h..(k + 1) * h]) + rec)
                            } else {
                                xw + dot(rh, &rd[k * h..(k + 1) * h]) + rec
                            };
                            gz[k] = acts[1].apply(clip(v));
                        }
                        for j in 0..h {
                            let z = gz[j];
                            hs[j] = (1.0 - z) * gz[2 * h + j] + z * hs[j];
                        }
                    }
                }
                if let Some(y) = outs[0].as_deref_mut() {
                    let at = if cfg.layout1 {
                        ((b * cfg.seq + t) * cfg.dirs + d) * h
                    } else {
                        ((t * cfg.dirs + d) * cfg.batch + b) * h
                    };
                    for (o, &v) in y[at..at + h].iter_mut().zip(hs.iter()) {
                        *o = from(v);
                    }
                }
            }
            if let Some(yh) = outs.get_mut(1).and_then(|o| o.as_deref_mut()) {
                for (o, &v) in yh[state_at..state_at + h].iter_mut().zip(hs.iter()) {
                    *o = from(v);
                }
            }
            if let Some(yc) = outs.get_mut(2).and_then(|o| o.as_deref_mut()) {
                for (o, &v) in yc[state_at..state_at + h].iter_mut().zip(cs.iter()) {
                    *o = from(v);
                }
            }
        }
    }
}

fn gates_of(k: Kind) -> usize {
    match k {
        Kind::Rnn => 1,
        Kind::Gru => 3,
        Kind::Lstm => 4,
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testutil::{check_flow, rand_f32, t_f32, t_of};
    use memplan_ir::graph::AttrValue;

    /// RNN, GRU and LSTM split the batch of every output (X, `sequence_lens` and the initial
    /// states sliced with it), in both layouts and directions; the kernel on a slice of the batch
    /// is exactly that slice of the whole.
    #[test]
    fn recurrent_flows_split_the_batch() {
        let (seq, batch, input, h) = (3usize, 4usize, 2usize, 3usize);
        for (op, gates) in [("RNN", 1), ("GRU", 3), ("LSTM", 4)] {
            for (dir, d) in [("forward", 1), ("bidirectional", 2)] {
                for layout in [0i64, 1] {
                    let r = |shape: &[usize], seed: u64| {
                        t_f32(shape, &rand_f32(shape.iter().product(), seed))
                    };
                    let state = if layout == 0 {
                        [d, batch, h]
                    } else {
                        [batch, d, h]
                    };
                    let x = if layout == 0 {
                        r(&[seq, batch, input], 1)
                    } else {
                        r(&[batch, seq, input], 1)
                    };
                    let w = r(&[d, gates * h, input], 2);
                    let rr = r(&[d, gates * h, h], 3);
                    let b = r(&[d, 2 * gates * h], 4);
                    let lens = t_of(&[batch], &[3i32, 1, 2, 3]);
                    let (h0, c0) = (r(&state, 5), r(&state, 6));
                    let mut ins = vec![&x, &w, &rr, &b, &lens, &h0];
                    if op == "LSTM" {
                        ins.push(&c0);
                    }
                    let attrs = [
                        ("hidden_size", AttrValue::Int(h as i64)),
                        ("direction", AttrValue::String(dir.as_bytes().to_vec())),
                        ("layout", AttrValue::Int(layout)),
                    ];
                    let n_out = if op == "LSTM" { 3 } else { 2 };
                    let y_batch = if layout == 0 { 2 } else { 0 };
                    check_flow(op, &attrs, &ins, n_out, &[y_batch], &[1, 3])
                        .unwrap_or_else(|e| panic!("{op} {dir} layout {layout}: {e}"));
                }
            }
        }
    }
}
