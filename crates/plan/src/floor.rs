//! A lower bound on the peak any plan of a model can reach at given dims, whatever the order,
//! in-place reuse or chunking: the resident weights and inputs are held throughout; at the end every
//! graph output is held at once; and a node that no axis lets chunking split (its op has no axis
//! flow, or every axis of its outputs needs more than the matching part of its inputs; the flows
//! regions grow along, a reshape's scaled axes included) runs whole,
//! so its inputs and outputs are held at once while it runs (less the input its output 0 may
//! overwrite in place). A node that only axes of a few elements split (the heads of an attention
//! whose query and key axes a reshape mixes) runs in at most as many pieces as the product of
//! their extents, each holding at least its share of those bytes. Nodes whose outputs are known at inference time (shape arithmetic) are
//! constants by then and hold nothing, and so does a weight that is a constant of positions (a
//! causal mask), which chunking makes from index constants, or a constant of one repeated element
//! (a folded `full_like`), which it makes by `Expand`. Nodes that the rewrites before
//! chunking write anew or make only in part (a chain of movements that is a gather, the makers a
//! selection moves through, a scatter of a box) are taken as split as finely as chunking likes.

use std::collections::{BTreeMap, BTreeSet};

use memplan_ir::graph::{Graph, NodeId};
use memplan_ir::infer::Facts;
use memplan_ir::ops::axes::AxisFlow;
use memplan_sim::timeline::{BufId, Category, SimError, Timeline};

/// The floor and what holds it up.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Floor {
    /// The lower bound on the planned peak (resident bytes included).
    pub bytes: u64,
    /// Weights and inputs.
    pub resident_bytes: u64,
    /// What sets the bound above the resident bytes: the graph outputs, or the node that runs
    /// whole (its label), with the values it holds.
    pub held_by: String,
    pub values: Vec<String>,
}

/// How finely chunking can cut a node.
enum Cut {
    /// Into no more pieces than this: the product of the extents of the axes along which some
    /// output splits (tiles cut two at once), each piece holding at least its share of the
    /// node's inputs and outputs.
    Pieces(u64),
    /// As finely as it likes: an axis of unknown extent, or a form it writes anew (an op of
    /// positions, a `Constant` of positions: `chunk::positions`, or of one repeated element:
    /// `chunk::broadcasts`; a chain of movements that is a
    /// gather: `chunk::gathers`).
    Free,
}

/// How finely chunking can cut node `n` (see the module docs); `None`: not at all, it runs whole.
fn cut(
    g: &Graph,
    f: &Facts,
    dims: &BTreeMap<String, i64>,
    gathered: &BTreeSet<NodeId>,
    n: NodeId,
) -> Option<Cut> {
    let node = g.node(n);
    if node.subgraphs().next().is_some() {
        return None;
    }
    if gathered.contains(&n)
        || crate::chunk::splits_as_positions(node, f, dims)
        || (node.output_ids().next().is_some()
            && node
                .output_ids()
                .all(|v| crate::chunk::is_constant_made_anew(g, v)))
    {
        return Some(Cut::Free);
    }
    let flow = crate::chunk::growth_flows(g, f, dims, n)?;
    let mut most: Option<u64> = None;
    for (slot, axes) in flow.iter().enumerate() {
        let split: Vec<usize> = (0..axes.len())
            .filter(|&a| matches!(axes[a], AxisFlow::Split(_)))
            .collect();
        if split.is_empty() {
            continue;
        }
        let shape = node
            .outputs
            .get(slot)
            .copied()
            .flatten()
            .and_then(|v| f.get(v).shape_at(dims));
        let Some(shape) = shape else {
            return Some(Cut::Free);
        };
        let pieces = split
            .iter()
            .map(|&a| shape.get(a).copied().unwrap_or(u64::MAX))
            .fold(1u64, u64::saturating_mul);
        most = Some(most.map_or(pieces, |m| m.max(pieces)));
    }
    most.map(Cut::Pieces)
}

/// The bytes output 0 of node `n` can share with an input it may overwrite in place (the largest
/// such input of the output's size that is not resident; 0 when the op overwrites none).
fn inplace_share(
    g: &Graph,
    t: &Timeline,
    n: NodeId,
    size: &dyn Fn(BufId) -> Result<u64, SimError>,
) -> Result<u64, SimError> {
    let node = g.node(n);
    let Some(def) = memplan_ir::ops::lookup(node) else {
        return Ok(0);
    };
    let buf = |v: Option<memplan_ir::ValueId>| {
        v.and_then(|v| t.value_buf.get(v.index()).copied().flatten())
    };
    let Some(out) = buf(node.outputs.first().copied().flatten()) else {
        return Ok(0);
    };
    let want = size(out)?;
    let mut best = 0;
    for &k in def.mem.inplace {
        if let Some(b) = buf(node.inputs.get(k).copied().flatten()) {
            let live = t.buffers[b.0 as usize].alloc.is_some();
            if live && b != out && size(b)? == want {
                best = best.max(want);
            }
        }
    }
    Ok(best)
}

/// The floor of `graph` at `dims` (every symbol of the facts given).
pub fn floor(
    graph: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
) -> Result<Floor, SimError> {
    let t = Timeline::build(graph, facts, &facts.order)?;
    let size = |b: BufId| -> Result<u64, SimError> {
        let bytes = t.buffers[b.0 as usize]
            .size
            .eval_map(dims)
            .map_err(|e| SimError::Eval(e.to_string()))?;
        Ok(bytes.max(0) as u64)
    };
    let resident_buf = |b: BufId| t.buffers[b.0 as usize].alloc.is_none();
    // A constant of positions (a causal mask kept as a weight) is made from index constants
    // instead before chunking (`chunk::positions`), one of a single repeated element from that
    // element (`chunk::broadcasts`): it holds nothing.
    let made: BTreeSet<BufId> = graph
        .initializers
        .iter()
        .filter(|&&v| crate::chunk::is_constant_made_anew(graph, v))
        .filter_map(|v| t.value_buf.get(v.index()).copied().flatten())
        .collect();
    let mut resident = 0u64;
    for (k, b) in t.buffers.iter().enumerate() {
        if b.alloc.is_none() && b.category != Category::Scratch && !made.contains(&BufId(k as u32))
        {
            resident += size(BufId(k as u32))?;
        }
    }
    // The bytes of a set of values beyond the resident ones, each buffer once.
    let held = |vals: &mut dyn Iterator<Item = memplan_ir::ValueId>| -> Result<(u64, Vec<String>), SimError> {
        let mut seen = BTreeSet::new();
        let (mut bytes, mut names) = (0u64, Vec::new());
        for v in vals {
            let Some(b) = t.value_buf.get(v.index()).copied().flatten() else {
                continue;
            };
            if resident_buf(b) || !seen.insert(b) {
                continue;
            }
            bytes += size(b)?;
            names.push(graph.value(v).name.clone());
        }
        Ok((bytes, names))
    };
    let (out_bytes, out_names) = held(&mut graph.outputs.iter().copied())?;
    let mut best = Floor {
        bytes: resident + out_bytes,
        resident_bytes: resident,
        held_by: "the graph outputs".into(),
        values: out_names,
    };
    // Chains of movements that chunking writes as a gather (`chunk::gathers`).
    let mut gathered = crate::chunk::nodes_as_gathers(graph, facts, dims);
    // Makers a selection moves through, scatters of a box (`chunk::sink`, `chunk::boxes`).
    gathered.extend(crate::chunk::nodes_rewritten_split(graph, facts, dims));
    for &n in &facts.order {
        // A node whose outputs are all known (shape arithmetic: `Shape`, `Size` and what is
        // computed from them) becomes a constant (`chunk::freeze`) and holds nothing.
        let known = graph
            .node(n)
            .output_ids()
            .all(|v| facts.get(v).value.is_some());
        if known {
            continue;
        }
        let pieces = match cut(graph, facts, dims, &gathered, n) {
            Some(Cut::Free) => continue,
            Some(Cut::Pieces(p)) => p.max(1),
            None => 1,
        };
        let node = graph.node(n);
        let (mut bytes, names) = held(&mut node.input_ids().chain(node.output_ids()))?;
        bytes -= inplace_share(graph, &t, n, &size)?;
        let bytes = bytes.div_ceil(pieces);
        if resident + bytes > best.bytes {
            let why = if pieces == 1 {
                "which no axis splits".to_string()
            } else {
                format!("which its axes split into at most {pieces} pieces")
            };
            best = Floor {
                bytes: resident + bytes,
                resident_bytes: resident,
                held_by: format!("{}, {why}", node.label(n)),
                values: names,
            };
        }
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;
    use memplan_ir::graph::{DeclDim, DeclType};
    use memplan_ir::DataType;

    fn input(g: &mut Graph, name: &str, dims: Vec<DeclDim>) -> memplan_ir::ValueId {
        g.add_input(name, DeclType::tensor(DataType::F32, dims))
    }

    /// `y = Relu(x)` then `s = ReduceSum(y)` over all axes, then `z = Softmax(x)` on axis 1 (split
    /// along rows): the floor is the resident input plus the largest whole node's values.
    #[test]
    fn the_floor_is_held_up_by_the_largest_node_no_axis_splits() {
        let mut g = Graph::default();
        let n = DeclDim::Param("N".into());
        let x = input(&mut g, "x", vec![n.clone(), n.clone()]);
        let (_, y) = g.add_node("relu", "Relu", &[Some(x)], &["y"], vec![]);
        let (_, t) = g.add_node("t", "Transpose", &[Some(y[0])], &["t"], vec![]);
        let (_, s) = g.add_node("sum", "ReduceSum", &[Some(t[0])], &["s"], vec![]);
        g.outputs.push(s[0]);
        let f = memplan_ir::infer_graph(&g, 18).unwrap();
        let dims = BTreeMap::from([("N".to_string(), 8i64)]);
        let fl = floor(&g, &f, &dims).unwrap();
        // x: 256 B resident. ReduceSum over every axis has no split axis: it holds t (256 B)
        // and s (4 B) whole.
        assert_eq!(fl.resident_bytes, 256);
        assert_eq!(fl.bytes, 256 + 256 + 4);
        assert_eq!(fl.held_by, "'sum' (ReduceSum), which no axis splits");
        assert_eq!(fl.values, ["t", "s"]);
        // No plan goes below it.
        let p = crate::optimize(&g, &f, &dims, &crate::Options::default())
            .unwrap()
            .plan;
        assert!(p.arena_bytes + p.resident_bytes >= fl.bytes);
    }

    /// `s = ReduceSum(Relu(x), axes [1, 2])` of `x [4, N, N]`: only the first axis (4 elements)
    /// splits the sum, so it runs in at most 4 pieces, each holding a quarter of its values.
    #[test]
    fn a_node_only_short_axes_split_holds_its_share_of_each_piece() {
        let mut g = Graph::default();
        let n = DeclDim::Param("N".into());
        let x = input(&mut g, "x", vec![DeclDim::Value(4), n.clone(), n.clone()]);
        let (_, y) = g.add_node("relu", "Relu", &[Some(x)], &["y"], vec![]);
        let axes = g.add_initializer(memplan_ir::TensorData::from_i64("axes", vec![2], &[1, 2]));
        let (_, s) = g.add_node(
            "sum",
            "ReduceSum",
            &[Some(y[0]), Some(axes)],
            &["s"],
            vec![],
        );
        g.outputs.push(s[0]);
        let f = memplan_ir::infer_graph(&g, 18).unwrap();
        let dims = BTreeMap::from([("N".to_string(), 8i64)]);
        let fl = floor(&g, &f, &dims).unwrap();
        // x: 1024 B (and the 16 B of axes) resident; the sum holds y (1024 B) and s ([4, 1, 1]:
        // 16 B) in 4 pieces.
        assert_eq!(fl.resident_bytes, 1024 + 16);
        assert_eq!(fl.bytes, 1040 + (1024 + 16) / 4);
        assert_eq!(
            fl.held_by,
            "'sum' (ReduceSum), which its axes split into at most 4 pieces"
        );
        let p = crate::optimize(&g, &f, &dims, &crate::Options::default())
            .unwrap()
            .plan;
        assert!(p.arena_bytes + p.resident_bytes >= fl.bytes);
    }

    #[test]
    fn a_graph_whose_nodes_all_split_is_held_up_by_its_outputs() {
        let mut g = Graph::default();
        let n = DeclDim::Param("N".into());
        let x = input(&mut g, "x", vec![n.clone(), DeclDim::Value(4)]);
        let (_, y) = g.add_node("relu", "Relu", &[Some(x)], &["y"], vec![]);
        let (_, z) = g.add_node("neg", "Neg", &[Some(y[0])], &["z"], vec![]);
        g.outputs.push(z[0]);
        let f = memplan_ir::infer_graph(&g, 18).unwrap();
        let fl = floor(&g, &f, &BTreeMap::from([("N".to_string(), 10i64)])).unwrap();
        assert_eq!((fl.resident_bytes, fl.bytes), (160, 320));
        assert_eq!(fl.held_by, "the graph outputs");
    }
}
