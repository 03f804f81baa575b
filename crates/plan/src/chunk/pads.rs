//! Pads as gathers: a `Pad` of one axis ([`Moves::Padded`]) whose amounts and mode are known at
//! the dims is a `Gather` along that axis of the input positions each output position reads
//! ([`movement::pad_map`]), and, in `constant` mode, a `Where` of a `bool` mask of the positions
//! that read one, that gather and the constant. The same elements land in the same places: the
//! same bits.
//!
//! A pad's axis flow mixes the axis it pads, so a region splits it only at the pad's output, which
//! is made whole. A gather's positions are sliced per chunk over its input read whole, and the
//! mask is sliced with them, so a region splits that axis from the positions on, and the padded
//! copy is never made whole. Where a slice cuts the padded axis of a pad's output, the slice is
//! written as the gather of the positions it keeps, composed with the pad's: local attention's
//! band of blocks (LongT5 pads the key blocks by one on each side and concatenates three slices of
//! them at offsets 0, 1 and 2). Where the pad is read otherwise (PEGASUS-X's staggered blocks pad
//! the hidden states by half a block before the projections), the pad itself becomes the gather.

use std::collections::BTreeMap;

use bytes::Bytes;
use memplan_ir::dtype::DataType;
use memplan_ir::graph::{AttrValue, Model, Node, ValueId};
use memplan_ir::infer::Facts;
use memplan_ir::ops::movement::{pad_map, pad_sides, PadMode};
use memplan_ir::ops::{self, Moves};
use memplan_ir::TensorData;

use super::gathers::{gather, slice_cut};
use super::rewrite::{Adder, NewNode};

/// A pad of one axis, read at the dims.
pub(crate) struct PadAlong {
    /// The padded input.
    x: ValueId,
    axis: usize,
    /// The position of `x` along `axis` each output position reads; `None`: the constant.
    map: Vec<Option<usize>>,
    /// The constant (input 2), where given; zero otherwise.
    value: Option<ValueId>,
    /// The element type (not strings: a zero of it is all-zero bytes).
    dtype: DataType,
}

/// The pad `node` is ([`Moves::Padded`]) where it pads (or crops) exactly one axis by amounts
/// known at the dims, in a known mode, with its constant given as an input or zero.
pub(crate) fn pad_along(
    node: &Node,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
) -> Option<PadAlong> {
    if !node.is_onnx_domain() || ops::lookup(node).and_then(|d| d.moves) != Some(Moves::Padded) {
        return None;
    }
    let x = node.inputs.first().copied().flatten()?;
    let from = facts.get(x).shape_at(dims)?;
    let dtype = facts.get(x).dtype.filter(|&t| t != DataType::String)?;
    let (ins, _) = facts.node_io(node);
    let (before, after) = pad_sides(node, &ins, from.len())?;
    let padded: Vec<usize> = (0..from.len())
        .filter(|&a| before[a] != 0 || after[a] != 0)
        .collect();
    let [axis] = padded[..] else {
        return None;
    };
    let mode = match node.attr("mode") {
        Some(AttrValue::String(m)) => PadMode::named(Some(std::str::from_utf8(m).ok()?))?,
        Some(_) => return None,
        None => PadMode::Constant,
    };
    // The opset-2 constant is an attribute: only its default, zero, has no input to read.
    if matches!(node.attr("value"), Some(AttrValue::Float(v)) if *v != 0.0) {
        return None;
    }
    // A pad of an empty axis reads nothing a gather could name.
    let n = usize::try_from(from[axis]).ok().filter(|&n| n > 0)?;
    let out = usize::try_from(n as i64 + before[axis] + after[axis]).ok()?;
    let map = pad_map(n, before[axis], out, mode)?;
    let value = node.inputs.get(2).copied().flatten().filter(|&v| {
        facts
            .get(v)
            .shape_at(dims)
            .is_some_and(|s| s.iter().product::<u64>() > 0)
    });
    Some(PadAlong {
        x,
        axis,
        map,
        value,
        dtype,
    })
}

/// `model` with every pad of one axis ([`pad_along`]) of at least `min_bytes` written as a gather
/// (see the module docs): each slice of its output that cuts only that axis as the gather of the
/// positions it keeps, and the pad itself where anything else reads it (or it is a graph output).
/// `None` when there is none.
pub(crate) fn pads_as_gathers(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    min_bytes: u64,
) -> Option<Model> {
    let g = &model.graph;
    let consumers = g.consumers();
    let large = |v: ValueId| super::rewrite::holds_at_least(facts, dims, v, min_bytes);
    // The pad a slice cuts along its padded axis, and the input position each position it keeps
    // reads (the pad's map, composed with the slice's positions).
    let sliced = |node: &Node| -> Option<(PadAlong, Vec<Option<usize>>)> {
        let (y, axis, positions) = slice_cut(node, facts, dims)?;
        let pad = pad_along(g.node(g.producer(y)?), facts, dims)?;
        (pad.axis == axis && large(y)).then_some(())?;
        let map = positions
            .iter()
            .map(|&i| usize::try_from(i).ok().map(|i| pad.map[i]))
            .collect::<Option<Vec<_>>>()?;
        Some((pad, map))
    };
    super::rewrite::rewrite_nodes(model, |node, add| {
        if let Some((pad, map)) = sliced(node) {
            return gathered(facts, add, &node.name, &pad, &map);
        }
        let pad = pad_along(node, facts, dims)?;
        let y = node.outputs.first().copied().flatten()?;
        let only_sliced = !g.outputs.contains(&y)
            && consumers[y.index()]
                .iter()
                .all(|&c| sliced(g.node(c)).is_some());
        (large(y) && !only_sliced).then_some(())?;
        gathered(facts, add, &node.name, &pad, &pad.map)
    })
}

/// What reads `map` of `pad`'s input along its axis becomes: a `Gather` of those positions, and
/// where some position takes the constant, a `Where` of the mask of those that do not, the gather
/// (the constant's positions read position 0) and the constant.
fn gathered(
    facts: &Facts,
    add: &mut Adder,
    base: &str,
    pad: &PadAlong,
    map: &[Option<usize>],
) -> Option<NewNode> {
    let index: Vec<i64> = map.iter().map(|p| p.unwrap_or(0) as i64).collect();
    let n = index.len() as u64;
    if map.iter().all(Option::is_some) {
        let idx = add.ints(&format!("{base}/positions"), vec![n], &index);
        return Some(gather("Gather", pad.x, idx, pad.axis));
    }
    let rank = facts.get(pad.x).shape.as_ref()?.len();
    let mut mask_dims = vec![1u64; rank];
    mask_dims[pad.axis] = n;
    let inside: Vec<u8> = map.iter().map(|p| u8::from(p.is_some())).collect();
    let mask = TensorData::from_raw(
        format!("{base}/inside"),
        DataType::Bool,
        mask_dims,
        Bytes::from(inside),
    )
    .ok()?;
    // The constant given, or a zero of the type to add.
    let constant: Result<ValueId, TensorData> = match pad.value {
        Some(v) => Ok(v),
        None => {
            let zero = vec![0u8; pad.dtype.bytes_for(1) as usize];
            Err(
                TensorData::from_raw(format!("{base}/zero"), pad.dtype, Vec::new(), zero.into())
                    .ok()?,
            )
        }
    };
    let idx = add.ints(&format!("{base}/positions"), vec![n], &index);
    let mask = add.constant(mask);
    let value = constant.unwrap_or_else(|t| add.constant(t));
    let from = gather("Gather", pad.x, idx, pad.axis);
    let gathered = add.node(
        &format!("{base}/gathered"),
        from.op,
        &from.inputs,
        from.attrs,
    );
    Some(NewNode {
        op: "Where",
        inputs: vec![Some(mask), Some(gathered), Some(value)],
        attrs: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use memplan_ir::graph::{Attribute, DeclDim, DeclType, Graph, ValueKind};

    /// A graph over `x: [1, 8, 4]` and a scalar constant `c`, built node by node (each node's
    /// output named after it).
    struct B(Graph, ValueId, ValueId);

    impl B {
        fn new() -> B {
            let mut g = Graph::default();
            let dims = [1, 8, 4].map(DeclDim::Value).to_vec();
            let x = g.add_input("x", DeclType::tensor(DataType::F32, dims));
            let c = g.add_initializer(TensorData::from_f32("c", vec![], &[-1.0]));
            B(g, x, c)
        }

        fn ints(&mut self, v: &[i64]) -> ValueId {
            let name = format!("i{}", self.0.values.len());
            self.0
                .add_initializer(TensorData::from_i64(name, vec![v.len() as u64], v))
        }

        fn op(&mut self, op: &str, ins: &[ValueId], attrs: Vec<Attribute>) -> ValueId {
            let name = format!("n{}", self.0.nodes.len());
            let ins: Vec<Option<ValueId>> = ins.iter().map(|&v| Some(v)).collect();
            self.0.add_node(name.clone(), op, &ins, &[&name], attrs).1[0]
        }

        /// `Pad(x)` by `pads` (before and after each axis), of mode `mode`, with the constant.
        fn pad(&mut self, pads: &[i64], mode: &str) -> ValueId {
            let (x, c) = (self.1, self.2);
            let p = self.ints(pads);
            let mode = super::super::rewrite::attr("mode", AttrValue::String(mode.into()));
            self.op("Pad", &[x, p, c], vec![mode])
        }

        fn slice(&mut self, y: ValueId, start: i64, end: i64) -> ValueId {
            let (s, e, a) = (self.ints(&[start]), self.ints(&[end]), self.ints(&[1]));
            self.op("Slice", &[y, s, e, a], Vec::new())
        }

        /// The model with output `y`, rewritten with every pad taken as large.
        fn rewritten(mut self, y: ValueId) -> Option<Graph> {
            self.0.outputs = vec![y];
            let model = Model {
                graph: self.0,
                ..Model::default()
            };
            let dims = BTreeMap::new();
            let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
            pads_as_gathers(&model, &facts, &dims, 0).map(|m| m.graph)
        }
    }

    fn constant(g: &Graph, v: ValueId) -> &TensorData {
        match &g.value(v).kind {
            ValueKind::Initializer(t) => t,
            k => panic!("'{}' is not a constant: {k:?}", g.value(v).name),
        }
    }

    /// Each gather's positions and, for those under a `Where`, its mask; in node order.
    fn gathers(g: &Graph) -> Vec<(Vec<i64>, Option<Vec<u8>>)> {
        let consumers = g.consumers();
        g.node_ids()
            .filter(|&n| g.node(n).op == "Gather")
            .map(|n| {
                let node = g.node(n);
                assert_eq!(node.inputs[0], g.inputs.first().copied(), "gathers read x");
                let positions = constant(g, node.inputs[1].unwrap()).to_i64_vec().unwrap();
                let y = node.outputs[0].unwrap();
                let mask = consumers[y.index()]
                    .iter()
                    .map(|&w| g.node(w))
                    .find(|w| w.op == "Where")
                    .map(|w| {
                        assert_eq!(w.inputs[1], Some(y));
                        constant(g, w.inputs[0].unwrap()).raw().unwrap().to_vec()
                    });
                (positions, mask)
            })
            .collect()
    }

    /// LongT5's band of blocks: the blocks padded by one on each side and cut at offsets 0, 1
    /// and 2. Each cut is a gather of the input's blocks (position 0 where the pad's constant is
    /// read, masked off); the middle one reads no constant and is a gather alone. The pad is gone.
    #[test]
    fn slices_of_a_pad_are_gathers_of_its_input() {
        let mut b = B::new();
        let p = b.pad(&[0, 1, 0, 0, 1, 0], "constant");
        let cuts: Vec<ValueId> = (0..3).map(|k| b.slice(p, k, k + 8)).collect();
        let axis = super::super::rewrite::axis_attr(2);
        let y = b.op("Concat", &cuts, vec![axis]);
        let g = b.rewritten(y).expect("rewritten");
        assert!(g.nodes.iter().all(|n| n.op != "Pad" && n.op != "Slice"));
        let inside = |k: usize| -> Vec<u8> { (0..8).map(|i| u8::from(i != k)).collect() };
        assert_eq!(
            gathers(&g),
            vec![
                (vec![0, 0, 1, 2, 3, 4, 5, 6], Some(inside(0))),
                ((0..8).collect(), None),
                (vec![1, 2, 3, 4, 5, 6, 7, 0], Some(inside(7))),
            ]
        );
        let wheres: Vec<_> = g.nodes.iter().filter(|n| n.op == "Where").collect();
        assert_eq!(wheres.len(), 2);
        for w in wheres {
            assert_eq!(
                g.value(w.inputs[2].unwrap()).name,
                "c",
                "the pad's constant"
            );
            let mask = constant(&g, w.inputs[0].unwrap());
            assert_eq!(
                (mask.dtype, &mask.dims[..]),
                (DataType::Bool, &[1, 8, 1][..])
            );
        }
    }

    /// A pad read otherwise becomes the gather itself: two rows of the constant before the input
    /// (and one cropped at its end); in `edge` mode the border repeats the end rows, a gather
    /// alone. A pad of two axes stays.
    #[test]
    fn a_pad_read_whole_is_a_gather_and_pads_of_two_axes_stay() {
        let mut b = B::new();
        let p = b.pad(&[0, 2, 0, 0, -1, 0], "constant");
        let y = b.op("Relu", &[p], Vec::new());
        let g = b.rewritten(y).expect("rewritten");
        assert!(g.nodes.iter().all(|n| n.op != "Pad"));
        assert_eq!(
            gathers(&g),
            vec![(
                vec![0, 0, 0, 1, 2, 3, 4, 5, 6],
                Some(vec![0, 0, 1, 1, 1, 1, 1, 1, 1])
            )]
        );
        let mut b = B::new();
        let p = b.pad(&[0, 1, 0, 0, 2, 0], "edge");
        let y = b.op("Relu", &[p], Vec::new());
        let g = b.rewritten(y).expect("rewritten");
        assert_eq!(
            gathers(&g),
            vec![(vec![0, 0, 1, 2, 3, 4, 5, 6, 7, 7, 7], None)]
        );
        let mut b = B::new();
        let p = b.pad(&[0, 1, 1, 0, 1, 1], "constant");
        let y = b.op("Relu", &[p], Vec::new());
        assert!(b.rewritten(y).is_none());
    }
}
