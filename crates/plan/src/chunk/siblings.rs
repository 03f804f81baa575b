//! Chunking twice. A region split along an axis of few positions (BigBird's and PEGASUS-X's four
//! heads) leaves each chunk's clones as large as a quarter of the region's tensors, and no other
//! region gets below them: the clones are made by chunking, and are not chunked again. With
//! [`ChunkOptions::nested`](super::ChunkOptions::nested), regions also grow in the chunks an
//! earlier step made, along any axis their clones pass (a head's query blocks), and a region
//! chosen inside one chunk is applied alike to every other chunk of that step. The chunks are the
//! same nodes in the same order on slices of one width (the last one maybe shorter), so the region
//! of one chunk maps to another's node by node and slot by slot; a chunk whose map fails (another
//! op, a node gone) is left as it is.
//!
//! Each application is the one-axis rewrite of [`super::rewrite`], so outputs stay bit-identical.

use std::collections::{BTreeMap, BTreeSet};

use memplan_ir::graph::{Graph, NodeId, ValueId};

use super::roll::Unrolled;
use super::Region;

/// The most chunks of a step whose clones regions grow in again (heads: BigBird's and PEGASUS-X's
/// four).
const MAX_CHUNKS: usize = 16;

/// The chunks earlier steps made: per step, per chunk, the names of its slices and clones in the
/// order the rewrite emitted them.
#[derive(Default)]
pub(crate) struct Sets {
    sets: Vec<Vec<Vec<String>>>,
}

/// A region by names, to find again in a graph that later rewrites changed.
pub(crate) struct Named {
    nodes: Vec<String>,
    keep: Vec<String>,
    axes: Vec<(String, Option<usize>)>,
    chunks: usize,
}

impl Sets {
    /// Records the chunks of one unrolled step, where each is one position of a short axis (at
    /// most [`MAX_CHUNKS`] of them: the axis is spent, and each chunk still holds a large part of
    /// the region) and every chunk has as many nodes. A step of wider chunks could have taken more
    /// along its own axis, and one of many chunks leaves them small; opening their clones too
    /// multiplies the candidates of every later step (the chunking tests' `lowest` ran 3.5 times
    /// as long with every step open, the pair transition's `lowest` 80 times with its 256 rows).
    pub fn add(&mut self, u: &Unrolled) {
        if u.chunks.len() > MAX_CHUNKS || u.widths.iter().any(|&w| w != 1) {
            return;
        }
        let chunks: Vec<Vec<String>> = u
            .chunks
            .iter()
            .map(|c| {
                c.slices
                    .iter()
                    .map(|(n, _)| n.clone())
                    .chain(c.clones.iter().cloned())
                    .collect()
            })
            .collect();
        let len = chunks.first().map_or(0, Vec::len);
        if chunks.len() >= 2 && len > 0 && chunks.iter().all(|c| c.len() == len) {
            self.sets.push(chunks);
        }
    }

    /// The names of every node of a recorded chunk: regions may grow in them.
    pub fn open(&self) -> BTreeSet<String> {
        self.sets.iter().flatten().flatten().cloned().collect()
    }

    /// Where every node of `r` (in `g`) lies in one chunk of one recorded step: the same region in
    /// each other chunk of that step, by names; otherwise none.
    pub fn siblings(&self, g: &Graph, r: &Region) -> Vec<Named> {
        let names: BTreeSet<&str> = r.nodes.iter().map(|&n| g.node(n).name.as_str()).collect();
        let by_name = nodes_by_name(g);
        for set in &self.sets {
            let Some(c) = set
                .iter()
                .position(|chunk| names.iter().all(|n| chunk.iter().any(|m| m == n)))
            else {
                continue;
            };
            return (0..set.len())
                .filter(|&d| d != c)
                .filter_map(|d| map_region(g, &by_name, r, &set[c], &set[d]))
                .collect();
        }
        Vec::new()
    }
}

/// Region `r` of chunk `from` carried to chunk `to` (the same positions in both lists): each node
/// to the node at its position, each value to the value in the same slot of the mapped node. `None`
/// where a node is missing from `g` or maps to another op or arity, or a value of the region's
/// axes is in no slot of its nodes.
fn map_region(
    g: &Graph,
    by_name: &BTreeMap<&str, NodeId>,
    r: &Region,
    from: &[String],
    to: &[String],
) -> Option<Named> {
    let pos: BTreeMap<&str, usize> = from
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let mut node_map: BTreeMap<NodeId, String> = BTreeMap::new();
    let mut value_map: BTreeMap<ValueId, String> = BTreeMap::new();
    for &n in &r.nodes {
        let node = g.node(n);
        let other_name = to.get(*pos.get(node.name.as_str())?)?;
        let other = g.node(*by_name.get(other_name.as_str())?);
        if other.op != node.op
            || other.inputs.len() != node.inputs.len()
            || other.outputs.len() != node.outputs.len()
        {
            return None;
        }
        let slots = node
            .inputs
            .iter()
            .zip(&other.inputs)
            .chain(node.outputs.iter().zip(&other.outputs));
        for (a, b) in slots {
            match (a, b) {
                (Some(a), Some(b)) => {
                    let name = g.value(*b).name.clone();
                    if value_map
                        .insert(*a, name.clone())
                        .is_some_and(|was| was != name)
                    {
                        return None;
                    }
                }
                (None, None) => {}
                _ => return None,
            }
        }
        node_map.insert(n, other_name.clone());
    }
    let axes = r
        .axes
        .iter()
        .map(|(v, a)| Some((value_map.get(v)?.clone(), *a)))
        .collect::<Option<Vec<_>>>()?;
    Some(Named {
        nodes: r.nodes.iter().map(|n| node_map[n].clone()).collect(),
        keep: r.keep.iter().map(|n| node_map[n].clone()).collect(),
        axes,
        chunks: r.chunks,
    })
}

/// Every node of `g` by its name.
pub(super) fn nodes_by_name(g: &Graph) -> BTreeMap<&str, NodeId> {
    g.node_ids().map(|n| (g.node(n).name.as_str(), n)).collect()
}

impl Named {
    /// The region in `g`, where every node and value is still there.
    pub fn resolve(&self, g: &Graph) -> Option<Region> {
        let by_name = nodes_by_name(g);
        let node = |n: &String| by_name.get(n.as_str()).copied();
        Some(Region {
            nodes: self.nodes.iter().map(node).collect::<Option<_>>()?,
            keep: self.keep.iter().map(node).collect::<Option<_>>()?,
            axes: self
                .axes
                .iter()
                .map(|(v, a)| Some((g.find_value(v)?, *a)))
                .collect::<Option<_>>()?,
            chunks: self.chunks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::rewrite::apply_unrolled;
    use memplan_ir::graph::{DeclDim, DeclType, Model};
    use memplan_ir::DataType;

    /// `y = relu(exp(x))` over `x [2, 16, 8]`, split along its 2 "heads" into two chunks.
    fn split_heads() -> (Model, BTreeMap<String, i64>, Unrolled) {
        let mut g = Graph::default();
        let dims = [2, 16, 8].map(DeclDim::Value).to_vec();
        let x = g.add_input("x", DeclType::tensor(DataType::F32, dims));
        let (e, a) = g.add_node("exp", "Exp", &[Some(x)], &["a"], vec![]);
        let (r, y) = g.add_node("relu", "Relu", &[Some(a[0])], &["y"], vec![]);
        g.outputs.push(y[0]);
        let m = Model {
            graph: g,
            ..Model::default()
        };
        let region = Region {
            nodes: BTreeSet::from([e, r]),
            axes: BTreeMap::from([(x, Some(0)), (a[0], Some(0)), (y[0], Some(0))]),
            chunks: 2,
            keep: BTreeSet::new(),
        };
        let dims = BTreeMap::new();
        let facts = memplan_ir::infer_model_for(&m, &dims).unwrap();
        let (m, u) = apply_unrolled(&m, &facts, &dims, &region).unwrap();
        (m, dims, u)
    }

    /// Head 0's `exp` clone split along the rows maps to head 1's clone, its slice and its output;
    /// both apply, and the graph keeps its output. A region across both heads has no siblings.
    #[test]
    fn a_region_in_one_chunk_maps_to_the_same_nodes_of_the_others() {
        let (m, dims, u) = split_heads();
        let mut sets = Sets::default();
        sets.add(&u);
        let g = &m.graph;
        let node = |name: &str| g.node_ids().find(|&n| g.node(n).name == name).unwrap();
        let exp = |c: usize| node(&u.chunks[c].clones[0]);
        let region = |nodes: &[NodeId]| Region {
            nodes: nodes.iter().copied().collect(),
            axes: nodes
                .iter()
                .flat_map(|&n| g.node(n).input_ids().chain(g.node(n).output_ids()))
                .map(|v| (v, Some(1)))
                .collect(),
            chunks: 4,
            keep: BTreeSet::new(),
        };
        let head0 = region(&[exp(0)]);
        let alike = sets.siblings(g, &head0);
        assert_eq!(alike.len(), 1);
        let head1 = alike[0].resolve(g).unwrap();
        assert_eq!(head1, region(&[exp(1)]));
        assert!(sets.siblings(g, &region(&[exp(0), exp(1)])).is_empty());
        // Head 0's rows in 4 chunks, then head 1's, found again by names in the graph between.
        let facts = memplan_ir::infer_model_for(&m, &dims).unwrap();
        let (m, _) = apply_unrolled(&m, &facts, &dims, &head0).unwrap();
        let head1 = alike[0].resolve(&m.graph).unwrap();
        let facts = memplan_ir::infer_model_for(&m, &dims).unwrap();
        let (m, u1) = apply_unrolled(&m, &facts, &dims, &head1).unwrap();
        assert_eq!(u1.chunks.len(), 4);
        let exps = m.graph.nodes.iter().filter(|n| n.op == "Exp").count();
        assert_eq!(exps, 8, "two heads of four row chunks each");
        let facts = memplan_ir::infer_model_for(&m, &dims).unwrap();
        let y = m.graph.outputs[0];
        assert_eq!(facts.get(y).shape_at(&dims).unwrap(), [2, 16, 8]);
    }
}
