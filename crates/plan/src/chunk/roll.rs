//! Folding an unrolled chunking back into one `Scan`, so that hundreds of chunks do not make a
//! file hundreds of times the region's size.
//!
//! [`super::rewrite::apply`] unrolls a region: per chunk, `Slice`s of the split inputs and a clone
//! of every region node, then one `Concat` per region output. When every chunk has the same width
//! `k` (extent `E = T*k`), the chunks differ only in which slice they read, so chunk 0's clones are
//! the body of a `Scan` over `T` iterations:
//!
//! - each split input `x` (split along `a`) is reshaped (a view) from `[.., E, ..]` to
//!   `[.., T, k, ..]` and scanned along `a`: iteration `t` reads `[.., k, ..]`, chunk `t`'s slice
//!   (when only ones precede `a`, `T` goes in front instead: the same bytes, scanned along 0);
//! - the body is chunk 0's clones; what they read from outside the region (weights, inputs read
//!   whole, the chunk's own shape constants) they read from the enclosing scope;
//! - each region output is a scan output along the concatenation axis, `[.., T, k, ..]`, reshaped
//!   (a view) to `[.., E, ..]` under the output's own name, so its readers are untouched.
//!
//! When the last chunk is shorter (the extent is not a multiple of `k`), the leading `T` chunks of
//! width `k` fold: each split input's first `T*k` along `a` (a `Slice`, a view when only ones
//! precede `a`) is reshaped and scanned, and each region output's `Concat` stays, joining the
//! scan output (reshaped to `T*k` along its axis) with the pieces of the chunks left unrolled.
//!
//! Every iteration computes exactly what the clone of its chunk computed, from the same elements,
//! so outputs stay bit-identical. The `Scan`'s memory (its body's peak, its outputs made first and
//! filled in place) is what `memplan_sim::control` predicts and the executor does, so the plan of
//! the folded graph is exact too; it is planned like any other graph.

use std::collections::{BTreeMap, BTreeSet};

use memplan_ir::graph::{
    AttrValue, DeclDim, DeclType, Graph, Model, Names, Node, NodeId, ValueId, ValueKind,
};
use memplan_ir::infer::Facts;
use memplan_ir::TensorData;

use super::rewrite::attr;
use super::ChunkError;

/// The nodes one chunk of an unrolled region is made of, by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChunkNodes {
    /// The `Slice` of each split input, with its axis.
    pub slices: Vec<(String, usize)>,
    /// The region nodes' clones, in order.
    pub clones: Vec<String>,
}

/// What [`super::rewrite::apply`] added for one region, by name (names survive later rewrites).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Unrolled {
    pub chunks: Vec<ChunkNodes>,
    /// The `Concat` of each region output, with its axis.
    pub concats: Vec<(String, usize)>,
    /// Each chunk's width along the split axis.
    pub widths: Vec<i64>,
}

impl Unrolled {
    /// How many leading chunks have chunk 0's width: the iterations of the `Scan` they fold into.
    pub fn trips(&self) -> usize {
        let k = self.widths.first();
        self.widths.iter().take_while(|w| Some(*w) == k).count()
    }

    /// Whether the region can be folded into a `Scan`: two or more leading chunks of one width,
    /// each reading a slice of some input (a `Scan` scans at least one; a region made only from
    /// what broadcasts along the split axis, an `Expand` of one element, slices nothing).
    pub fn foldable(&self) -> bool {
        self.trips() >= 2
            && self.widths.len() == self.chunks.len()
            && !self.concats.is_empty()
            && self.chunks.iter().all(|c| !c.slices.is_empty())
    }
}

fn err(m: String) -> ChunkError {
    ChunkError::Region(m)
}

/// The declared type of `v` at `dims`.
fn decl_of(
    g: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    v: ValueId,
) -> Result<DeclType, ChunkError> {
    let f = facts.get(v);
    let name = &g.value(v).name;
    let dtype = f
        .dtype
        .ok_or_else(|| err(format!("'{name}' has no known type")))?;
    Ok(DeclType::tensor(
        dtype,
        const_shape(facts, dims, v, name)?
            .into_iter()
            .map(DeclDim::Value)
            .collect(),
    ))
}

/// The shape of `v` at `dims`.
fn const_shape(
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    v: ValueId,
    name: &str,
) -> Result<Vec<i64>, ChunkError> {
    facts
        .get(v)
        .shape
        .as_ref()
        .and_then(|s| {
            s.iter()
                .map(|d| d.eval_map(dims).ok())
                .collect::<Option<Vec<i64>>>()
        })
        .ok_or_else(|| {
            err(format!(
                "the shape of '{name}' is not known at the given dims"
            ))
        })
}

fn blank(name: String, op: &str, inputs: Vec<Option<ValueId>>, outputs: Vec<ValueId>) -> Node {
    Node::new(name, op, inputs, outputs.into_iter().map(Some).collect())
}

/// A new 1-D `int64` initializer holding `s` (a `Reshape` target, a `Slice` bound), named from
/// `base`.
fn shape_const(out: &mut Graph, names: &mut Names, base: &str, s: &[i64]) -> ValueId {
    out.add_initializer(TensorData::from_i64(
        names.fresh(base),
        vec![s.len() as u64],
        s,
    ))
}

/// Where the iterations' axis goes in a chunk of `shape` cut along `axis`: in front when only
/// ones precede the cut (the same bytes, and a leading scan axis is what every runtime handles
/// without a transpose), else right before the cut.
fn scan_axis(shape: &[i64], axis: usize) -> usize {
    if shape[..axis].iter().all(|&d| d == 1) {
        0
    } else {
        axis
    }
}

/// Folds the chunks `u` describes into one `Scan` (see the module docs), with the shapes at
/// `dims` (every symbol given). The node list of the result is in topological order. `None` when
/// a later rewrite made something outside the chunks read a value inside them (a node made again
/// for another reader): the chunks are then no longer a closed region.
pub fn roll(
    model: &Model,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    u: &Unrolled,
) -> Result<Option<Model>, ChunkError> {
    if !u.foldable() {
        return Err(err("fewer than two leading chunks have one width".into()));
    }
    let g = &model.graph;
    let by_name = super::siblings::nodes_by_name(g);
    let find = |name: &str| {
        by_name
            .get(name)
            .copied()
            .ok_or_else(|| err(format!("node '{name}' of the chunked region is gone")))
    };
    if !closed(g, &by_name, u) {
        return Ok(None);
    }
    let folded = u.trips();
    let trips = folded as i64;
    // Chunks after the leading ones of one width (a shorter last chunk) stay unrolled, and must
    // not read what a folded chunk makes.
    let tail = folded < u.chunks.len();
    let nodes_of = |cs: &[ChunkNodes]| -> Result<BTreeSet<NodeId>, ChunkError> {
        cs.iter()
            .flat_map(|c| c.slices.iter().map(|(n, _)| n).chain(&c.clones))
            .map(|n| find(n))
            .collect()
    };
    // The folded chunks' slices and clones, removed with the fold.
    let gone = nodes_of(&u.chunks[..folded])?;
    for id in nodes_of(&u.chunks[folded..])? {
        if g.node(id)
            .input_ids()
            .any(|v| g.producer(v).is_some_and(|p| gone.contains(&p)))
        {
            return Ok(None);
        }
    }
    let first = &u.chunks[0];
    let mut names = Names::of(g);
    let mut out = g.clone();
    let mut body = Graph {
        name: names.fresh(&format!("{}__body", u.concats[0].0)),
        ..Graph::default()
    };
    // Main-graph value -> body value.
    let mut inside: BTreeMap<ValueId, ValueId> = BTreeMap::new();
    let mut new_nodes: Vec<Node> = Vec::new();
    let made = ValueKind::Node {
        node: NodeId(u32::MAX),
        slot: 0,
    };
    // Split inputs: reshaped to [.., T, k, ..] and scanned along the chunk axis.
    let (mut scan_ins, mut in_axes) = (Vec::new(), Vec::new());
    for (name, axis) in &first.slices {
        let node = g.node(find(name)?);
        let (Some(Some(x)), Some(Some(piece))) = (node.inputs.first(), node.outputs.first()) else {
            return Err(err(format!("slice '{name}' has no input or output")));
        };
        let xname = &g.value(*x).name;
        let mut split = const_shape(facts, dims, *x, xname)?;
        let k = const_shape(facts, dims, *piece, &g.value(*piece).name)?
            .get(*axis)
            .copied()
            .ok_or_else(|| err(format!("slice '{name}' cuts beyond its rank")))?;
        split[*axis] = k;
        let at = scan_axis(&split, *axis);
        split.insert(at, trips);
        // With chunks left unrolled after them, the folded ones read the first `T*k` of `x`.
        let whole = if tail {
            let starts = shape_const(&mut out, &mut names, &format!("{xname}__scan_start"), &[0]);
            let ends = shape_const(
                &mut out,
                &mut names,
                &format!("{xname}__scan_end"),
                &[trips * k],
            );
            let axes = shape_const(
                &mut out,
                &mut names,
                &format!("{xname}__scan_axis"),
                &[*axis as i64],
            );
            let p = out.add_value(names.fresh(&format!("{xname}__scan_prefix")), made.clone());
            new_nodes.push(blank(
                names.fresh(&format!("{xname}__scan_slice")),
                "Slice",
                vec![Some(*x), Some(starts), Some(ends), Some(axes)],
                vec![p],
            ));
            p
        } else {
            *x
        };
        let target = shape_const(
            &mut out,
            &mut names,
            &format!("{xname}__scan_shape"),
            &split,
        );
        let y = out.add_value(names.fresh(&format!("{xname}__scan")), made.clone());
        new_nodes.push(blank(
            names.fresh(&format!("{xname}__scan_reshape")),
            "Reshape",
            vec![Some(whole), Some(target)],
            vec![y],
        ));
        scan_ins.push(Some(y));
        in_axes.push(at as i64);
        let b = body.add_input(
            g.value(*piece).name.clone(),
            decl_of(g, facts, dims, *piece)?,
        );
        inside.insert(*piece, b);
    }
    // The body: chunk 0's clones; everything else they read comes from the enclosing scope.
    let mut removed: BTreeSet<NodeId> = BTreeSet::new();
    for name in &first.clones {
        let id = find(name)?;
        removed.insert(id);
        let node = g.node(id);
        let mut ins = Vec::with_capacity(node.inputs.len());
        for i in &node.inputs {
            ins.push(i.map(|v| {
                *inside
                    .entry(v)
                    .or_insert_with(|| body.add_value(g.value(v).name.clone(), ValueKind::Outer))
            }));
        }
        let mut outs = Vec::with_capacity(node.outputs.len());
        for o in &node.outputs {
            outs.push(o.map(|v| {
                let b = body.add_value(g.value(v).name.clone(), made.clone());
                inside.insert(v, b);
                b
            }));
        }
        body.nodes.push(Node {
            inputs: ins,
            outputs: outs,
            ..node.clone()
        });
    }
    // Region outputs: chunk 0's piece is a scan output along the concatenation axis. With chunks
    // left unrolled, the `Concat` stays and joins the folded part with their pieces.
    let (mut scan_outs, mut out_axes, mut joins) = (Vec::new(), Vec::new(), Vec::new());
    let mut rewired: BTreeMap<NodeId, Node> = BTreeMap::new();
    for (name, axis) in &u.concats {
        let id = find(name)?;
        removed.insert(id);
        let node = g.node(id);
        let (Some(Some(piece)), Some(Some(y))) = (node.inputs.first(), node.outputs.first()) else {
            return Err(err(format!("concat '{name}' has no input or output")));
        };
        let b = *inside
            .get(piece)
            .ok_or_else(|| err(format!("concat '{name}' reads no piece of chunk 0")))?;
        body.values[b.index()].decl = Some(decl_of(g, facts, dims, *piece)?);
        body.outputs.push(b);
        let yname = g.value(*y).name.clone();
        let s = out.add_value(names.fresh(&format!("{yname}__scan")), made.clone());
        scan_outs.push(s);
        let piece_shape = const_shape(facts, dims, *piece, &g.value(*piece).name)?;
        out_axes.push(scan_axis(&piece_shape, *axis) as i64);
        let mut target = const_shape(facts, dims, *y, &yname)?;
        let joined = if tail {
            let k = piece_shape.get(*axis).copied().unwrap_or(0);
            let at = target
                .get_mut(*axis)
                .ok_or_else(|| err(format!("concat '{name}' joins beyond its rank")))?;
            *at = trips * k;
            let j = out.add_value(names.fresh(&format!("{yname}__folded")), made.clone());
            let mut ins = vec![Some(j)];
            ins.extend(node.inputs.iter().skip(folded).copied());
            rewired.insert(
                id,
                Node {
                    inputs: ins,
                    ..node.clone()
                },
            );
            j
        } else {
            *y
        };
        let target = shape_const(
            &mut out,
            &mut names,
            &format!("{yname}__join_shape"),
            &target,
        );
        joins.push(blank(
            names.fresh(&format!("{yname}__join")),
            "Reshape",
            vec![Some(s), Some(target)],
            vec![joined],
        ));
    }
    super::rewrite::set_producers(&mut body);
    let mut scan = blank(
        names.fresh(&format!("{}__scan", u.concats[0].0)),
        "Scan",
        scan_ins,
        scan_outs,
    );
    scan.attrs = vec![
        attr("body", AttrValue::Graph(Box::new(body))),
        attr("num_scan_inputs", AttrValue::Int(first.slices.len() as i64)),
        attr("scan_input_axes", AttrValue::Ints(in_axes)),
        attr("scan_output_axes", AttrValue::Ints(out_axes)),
    ];
    new_nodes.push(scan);
    new_nodes.append(&mut joins);
    removed.extend(&gone);
    // Constants only the removed nodes read (slice bounds, later chunks' shapes) go with them.
    let mut read_by_removed: BTreeSet<ValueId> = BTreeSet::new();
    for &n in &removed {
        read_by_removed.extend(g.node(n).input_ids());
    }
    let at = removed.iter().map(|n| n.index()).max().unwrap_or(0);
    let mut nodes = Vec::with_capacity(g.nodes.len() + new_nodes.len());
    for (i, node) in g.nodes.iter().enumerate() {
        let id = NodeId::from_index(i);
        if i == at {
            nodes.append(&mut new_nodes);
        }
        if let Some(r) = rewired.remove(&id) {
            nodes.push(r);
        } else if !removed.contains(&id) {
            nodes.push(node.clone());
        }
    }
    out.nodes = nodes;
    super::rewrite::set_producers(&mut out);
    let mut read: Vec<bool> = vec![false; out.values.len()];
    for n in &out.nodes {
        for v in n.input_ids() {
            read[v.index()] = true;
        }
        for sub in n.subgraphs() {
            for v in sub.outer_reads_resolved(&out) {
                read[v.index()] = true;
            }
        }
    }
    for &v in out.inputs.iter().chain(&out.outputs) {
        read[v.index()] = true;
    }
    let dropped: BTreeSet<ValueId> = read_by_removed
        .into_iter()
        .filter(|v| matches!(out.value(*v).kind, ValueKind::Initializer(_)) && !read[v.index()])
        .collect();
    out.initializers.retain(|v| !dropped.contains(v));
    let keep: Vec<bool> = (0..out.values.len())
        .map(|i| !dropped.contains(&ValueId::from_index(i)))
        .collect();
    let out = super::rewrite::retain_values(out, &keep);
    let order = out.topo_order().map_err(|e| err(e.to_string()))?;
    let out = super::rewrite::compact(crate::reorder(&out, &order));
    Ok(Some(Model {
        graph: out,
        ..model.clone()
    }))
}

/// Whether every node of the chunks and their concatenations is still there, only they read what
/// the chunks make, and every chunk is chunk 0 over its own slices: each clone reads, slot by slot,
/// what chunk 0's clone reads, except that where chunk 0 reads its own slice or clone, chunk `c`
/// reads its own at the same place, and where chunk 0 reads a constant, chunk `c` may read an
/// equal one (its shape).
fn closed(g: &Graph, by_name: &BTreeMap<&str, NodeId>, u: &Unrolled) -> bool {
    if !sliced_alike(g, by_name, u) {
        return false;
    }
    let mut inside: BTreeSet<NodeId> = BTreeSet::new();
    let names = u
        .chunks
        .iter()
        .flat_map(|c| c.slices.iter().map(|(n, _)| n).chain(&c.clones))
        .chain(u.concats.iter().map(|(n, _)| n));
    for name in names {
        match by_name.get(name.as_str()) {
            Some(&id) => inside.insert(id),
            None => return false,
        };
    }
    let consumers = g.consumers();
    let outputs: BTreeSet<ValueId> = g.outputs.iter().copied().collect();
    let concat_outs: BTreeSet<ValueId> = u
        .concats
        .iter()
        .filter_map(|(n, _)| by_name.get(n.as_str()))
        .flat_map(|&id| g.node(id).output_ids())
        .collect();
    inside.iter().all(|&id| {
        g.node(id).output_ids().all(|v| {
            concat_outs.contains(&v)
                || (!outputs.contains(&v)
                    && consumers[v.index()].iter().all(|c| inside.contains(c)))
        })
    })
}

/// The per-chunk half of [`closed`]: every chunk to fold has chunk 0's structure over its own
/// slices.
fn sliced_alike(g: &Graph, by_name: &BTreeMap<&str, NodeId>, u: &Unrolled) -> bool {
    // Node -> (chunk, position among the chunk's slices then clones).
    let mut place: BTreeMap<NodeId, (usize, usize)> = BTreeMap::new();
    let mut lists: Vec<Vec<NodeId>> = Vec::with_capacity(u.chunks.len());
    for (c, ch) in u.chunks.iter().take(u.trips()).enumerate() {
        let mut list = Vec::new();
        for name in ch.slices.iter().map(|(n, _)| n).chain(&ch.clones) {
            let Some(&id) = by_name.get(name.as_str()) else {
                return false;
            };
            place.insert(id, (c, list.len()));
            list.push(id);
        }
        lists.push(list);
    }
    let where_made = |v: ValueId| -> Option<(usize, usize, u32)> {
        match g.value(v).kind {
            ValueKind::Node { node, slot } => place.get(&node).map(|&(c, i)| (c, i, slot)),
            _ => None,
        }
    };
    let same_const = |a: ValueId, b: ValueId| match (&g.value(a).kind, &g.value(b).kind) {
        (ValueKind::Initializer(x), ValueKind::Initializer(y)) => {
            let (xs, ys) = (x.to_i64_vec(), y.to_i64_vec());
            x.dtype == y.dtype && x.dims == y.dims && xs.is_some() && xs == ys
        }
        _ => false,
    };
    let first = &lists[0];
    lists.iter().enumerate().skip(1).all(|(c, list)| {
        list.len() == first.len()
            && first.iter().zip(list).enumerate().all(|(i, (&n0, &nc))| {
                let (a, b) = (g.node(n0), g.node(nc));
                let slice = i < u.chunks[0].slices.len();
                a.op == b.op
                    && a.inputs.len() == b.inputs.len()
                    && a.inputs
                        .iter()
                        .zip(&b.inputs)
                        .enumerate()
                        .all(|(k, (x, y))| {
                            match (*x, *y) {
                                (None, None) => true,
                                // A slice's bounds differ from chunk to chunk.
                                (Some(_), Some(_)) if slice && k > 0 => true,
                                (Some(x), Some(y)) => match (where_made(x), where_made(y)) {
                                    (Some((0, i0, s0)), Some((cy, iy, sy))) => {
                                        cy == c && iy == i0 && sy == s0
                                    }
                                    (None, None) => x == y || same_const(x, y),
                                    _ => false,
                                },
                                _ => false,
                            }
                        })
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::{chunk_to_budget, ChunkOptions};
    use memplan_ir::DataType;

    /// x [N, 64] -> Exp -> Sigmoid -> Relu -> y: every node passes rows through.
    fn rows_model() -> Model {
        let mut g = Graph::default();
        let x = g.add_input(
            "x",
            DeclType::tensor(
                DataType::F32,
                vec![DeclDim::Param("N".into()), DeclDim::Value(64)],
            ),
        );
        let (_, a) = g.add_node("exp", "Exp", &[Some(x)], &["a"], vec![]);
        let (_, b) = g.add_node("sig", "Sigmoid", &[Some(a[0])], &["b"], vec![]);
        let (_, y) = g.add_node("relu", "Relu", &[Some(b[0])], &["y"], vec![]);
        g.outputs.push(y[0]);
        Model {
            graph: g,
            ..Model::default()
        }
    }

    /// Chunked in 4 at `n` rows, as low as it goes: the one step's record.
    fn chunked(n: i64) -> (Model, BTreeMap<String, i64>, Unrolled) {
        let dims = BTreeMap::from([("N".to_string(), n)]);
        let opts = ChunkOptions {
            chunk_counts: vec![4],
            max_steps: 1,
            ..ChunkOptions::default()
        };
        let c = chunk_to_budget(&rows_model(), &dims, &opts).unwrap();
        assert_eq!(c.steps.len(), 1);
        let u = c.steps[0].unrolled.clone().unwrap();
        (c.model, dims, u)
    }

    #[test]
    fn equal_chunks_fold_into_one_scan_over_a_reshaped_input() {
        let (m, dims, u) = chunked(64);
        assert!(u.foldable());
        assert_eq!(u.chunks.len(), 4);
        let facts = memplan_ir::infer_model_for(&m, &dims).unwrap();
        let folded = roll(&m, &facts, &dims, &u).unwrap().unwrap();
        let g = &folded.graph;
        let ops: Vec<&str> = g.nodes.iter().map(|n| n.op.as_str()).collect();
        assert_eq!(ops, ["Reshape", "Scan", "Reshape"], "{ops:?}");
        let scan = &g.nodes[1];
        let body = scan.subgraphs().next().unwrap();
        let body_ops: Vec<&str> = body.nodes.iter().map(|n| n.op.as_str()).collect();
        assert_eq!(body_ops, ["Exp", "Sigmoid", "Relu"]);
        assert!(matches!(scan.attr("scan_input_axes"), Some(AttrValue::Ints(v)) if v == &[0]));
        // Chunk 0's slice bounds and every later chunk's constants are gone with their nodes.
        assert!(g.initializers.len() <= 2, "{}", g.initializers.len());
        // The output keeps its name and shape: [4, 16, 64] reshaped back to [64, 64].
        let f = memplan_ir::infer_model_for(&folded, &dims).unwrap();
        let y = g.outputs[0];
        assert_eq!(g.value(y).name, "y");
        assert_eq!(const_shape(&f, &dims, y, "y").unwrap(), [64, 64]);
    }

    #[test]
    fn the_iterations_go_in_front_when_only_ones_precede_the_cut() {
        assert_eq!(scan_axis(&[1, 16, 8], 1), 0);
        assert_eq!(scan_axis(&[1, 1, 16], 2), 0);
        assert_eq!(scan_axis(&[2, 16], 1), 1);
        assert_eq!(scan_axis(&[16, 2], 0), 0);
    }

    #[test]
    fn the_leading_chunks_of_one_width_fold_and_a_shorter_last_one_stays() {
        // 62 rows in 4: 16, 16, 16, 14.
        let (m, dims, u) = chunked(62);
        assert_eq!(u.widths, [16, 16, 16, 14]);
        assert!(u.foldable());
        assert_eq!(u.trips(), 3);
        let facts = memplan_ir::infer_model_for(&m, &dims).unwrap();
        let folded = roll(&m, &facts, &dims, &u).unwrap().unwrap();
        let g = &folded.graph;
        let mut ops: Vec<&str> = g.nodes.iter().map(|n| n.op.as_str()).collect();
        ops.sort_unstable();
        // The first 48 rows (a Slice, a view here) reshaped and scanned; the last chunk's Slice
        // and clones as they were; the Concat joins the Scan's rows and the last chunk's.
        let want = [
            "Concat", "Exp", "Relu", "Reshape", "Reshape", "Scan", "Sigmoid", "Slice", "Slice",
        ];
        assert_eq!(ops, want, "{ops:?}");
        let scan = g.nodes.iter().find(|n| n.op == "Scan").unwrap();
        let f = memplan_ir::infer_model_for(&folded, &dims).unwrap();
        let shape_of = |v: ValueId| const_shape(&f, &dims, v, &g.value(v).name).unwrap();
        assert_eq!(shape_of(scan.outputs[0].unwrap()), [3, 16, 64]);
        let y = g.outputs[0];
        assert_eq!(g.value(y).name, "y");
        assert_eq!(shape_of(y), [62, 64]);
    }

    #[test]
    fn one_chunk_of_its_width_does_not_fold() {
        // Only the leading chunks of chunk 0's width fold: here there is one.
        let (m, dims, mut u) = chunked(62);
        u.widths = vec![16, 14, 16, 16];
        assert_eq!(u.trips(), 1);
        assert!(!u.foldable());
        let facts = memplan_ir::infer_model_for(&m, &dims).unwrap();
        assert!(roll(&m, &facts, &dims, &u).is_err());
    }

    #[test]
    fn chunks_that_slice_nothing_do_not_fold() {
        // A region of what broadcasts along the split axis reads no slice: nothing to scan.
        let (m, dims, mut u) = chunked(64);
        assert!(u.foldable());
        for c in &mut u.chunks {
            c.slices.clear();
        }
        assert!(!u.foldable());
        let facts = memplan_ir::infer_model_for(&m, &dims).unwrap();
        assert!(roll(&m, &facts, &dims, &u).is_err());
    }

    #[test]
    fn chunks_read_from_outside_are_not_folded() {
        let (mut m, dims, u) = chunked(64);
        // Something outside now reads chunk 1's Exp: the chunks are no longer a closed region.
        let g = &mut m.graph;
        let v = g.find_value("a__chunk1").unwrap();
        let (_, z) = g.add_node("outside", "Neg", &[Some(v)], &["z"], vec![]);
        g.outputs.push(z[0]);
        let facts = memplan_ir::infer_model_for(&m, &dims).unwrap();
        assert!(roll(&m, &facts, &dims, &u).unwrap().is_none());
    }
}
