//! Symbolic shape and type inference over a graph, with constant folding of small integer tensors.
//!
//! Every value gets a [`Fact`]: element type, shape as symbolic [`Expr`] dims, and, for small tensors
//! whose contents are known (shape arithmetic: `Shape -> Gather -> Concat -> Reshape`), the contents.
//! Rules live with each op in [`crate::ops`]; they fold contents that hold symbols, and a node
//! whose inputs are all known concrete tensors is evaluated by the executor's kernel (see
//! [`crate::fold`]). Inference never panics: an op without a rule leaves its
//! outputs unknown and is reported; a shape contradiction is an error naming the node.

use crate::graph::printable;
use std::collections::BTreeMap;

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::graph::{AttrValue, DeclDim, Graph, Model, Node, NodeId, ValueId, ValueKind};
use crate::tensor::TensorData;

/// Tensors with at most this many elements have their contents tracked when known.
pub const MAX_KNOWN_ELEMS: usize = 4096;

/// Known contents of a small tensor, row-major.
#[derive(Clone, Debug, PartialEq)]
pub enum Known {
    /// Integer or bool contents (bools as 0/1), possibly symbolic.
    Int(Vec<Expr>),
    /// Float contents.
    Float(Vec<f64>),
    /// Float contents holding symbols: shape arithmetic done in floats (`ceil(h / p) * p` in
    /// float, cast back to an integer). See [`Ratio`].
    Ratio(Vec<Ratio>),
}

/// A float element that is the rational `num / den` of a symbolic integer and a positive
/// constant. `exact` is false when the float holds that rational rounded once (a division by a
/// constant that is not a power of two): `Ceil`, `Floor` and a cast to an integer still give the
/// exact integer then, since a rational `n / d` that is not an integer lies at least `1 / d` from
/// every integer while one rounding moves it by at most `|n / d| * 2^-24` (`f32`), less than
/// `1 / d` for `|n| < 2^24`; sizes are taken to stay below that. Other arithmetic needs `exact`.
#[derive(Clone, Debug, PartialEq)]
pub struct Ratio {
    pub num: Expr,
    pub den: i64,
    pub exact: bool,
}

impl Ratio {
    /// The integer `n` as a float.
    pub fn int(n: Expr) -> Ratio {
        Ratio {
            num: n,
            den: 1,
            exact: true,
        }
    }

    /// A float constant as a ratio: one with a power-of-two denominator up to `2^20` (every
    /// float with an integer or binary-fraction value in shape arithmetic: 2.0, 0.5).
    pub fn of_float(f: f64) -> Option<Ratio> {
        let mut den = 1i64;
        while den <= 1 << 20 {
            let n = f * den as f64;
            if n.fract() == 0.0 && n.abs() < 9.0e15 {
                return Some(Ratio {
                    num: Expr::int(n as i64),
                    den,
                    exact: true,
                });
            }
            den *= 2;
        }
        None
    }

    /// The same value over denominator `l` (a multiple of `den`).
    pub fn num_over(&self, l: i64) -> Expr {
        &self.num * &Expr::int(l / self.den)
    }

    /// The constant value, when the numerator is one.
    pub fn as_f64(&self) -> Option<f64> {
        self.num.as_const().map(|n| n as f64 / self.den as f64)
    }
}

impl Known {
    pub fn len(&self) -> usize {
        match self {
            Known::Int(v) => v.len(),
            Known::Float(v) => v.len(),
            Known::Ratio(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Float contents from ratios: `Float` when every element is an exact constant, `Ratio`
    /// when some element holds a symbol, `None` when a constant is a rounded one (its float is
    /// the kernel's to compute, not this rule's).
    pub fn of_ratios(v: Vec<Ratio>) -> Option<Known> {
        if v.iter().any(|r| r.num.as_const().is_none()) {
            return Some(Known::Ratio(v));
        }
        v.iter()
            .map(|r| r.exact.then(|| r.as_f64()).flatten())
            .collect::<Option<Vec<f64>>>()
            .map(Known::Float)
    }

    /// The contents as float ratios (integers over 1, floats with binary-fraction values).
    pub fn as_ratios(&self) -> Option<Vec<Ratio>> {
        match self {
            Known::Int(v) => Some(v.iter().cloned().map(Ratio::int).collect()),
            Known::Float(v) => v.iter().map(|&f| Ratio::of_float(f)).collect(),
            Known::Ratio(v) => Some(v.clone()),
        }
    }

    /// The elements at `idx`, in that order; `None` when an index is out of range.
    pub fn pick(&self, idx: &[usize]) -> Option<Known> {
        fn at<T: Clone>(v: &[T], idx: &[usize]) -> Option<Vec<T>> {
            idx.iter().map(|&j| v.get(j).cloned()).collect()
        }
        Some(match self {
            Known::Int(v) => Known::Int(at(v, idx)?),
            Known::Float(v) => Known::Float(at(v, idx)?),
            Known::Ratio(v) => Known::Ratio(at(v, idx)?),
        })
    }

    /// The parts one after the other: integers stay integers, floats stay floats, and floats
    /// mixed with ratios become ratios.
    pub fn concat(parts: &[&Known]) -> Option<Known> {
        let ints: Option<Vec<Expr>> = parts
            .iter()
            .map(|k| match k {
                Known::Int(x) => Some(x.as_slice()),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .map(|v| v.concat());
        let floats: Option<Vec<f64>> = parts
            .iter()
            .map(|k| match k {
                Known::Float(x) => Some(x.as_slice()),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .map(|v| v.concat());
        if let Some(v) = ints {
            return Some(Known::Int(v));
        }
        if let Some(v) = floats {
            return Some(Known::Float(v));
        }
        if !parts.iter().any(|k| matches!(k, Known::Ratio(_))) {
            return None;
        }
        let ratios: Vec<Vec<Ratio>> = parts.iter().map(|k| k.as_ratios()).collect::<Option<_>>()?;
        Some(Known::Ratio(ratios.concat()))
    }

    /// The contents as concrete integers, when every element is a constant.
    pub fn as_consts(&self) -> Option<Vec<i64>> {
        match self {
            Known::Int(v) => v.iter().map(|e| e.as_const()).collect(),
            Known::Float(v) => v
                .iter()
                .map(|f| (f.fract() == 0.0 && f.abs() < 9.0e15).then_some(*f as i64))
                .collect(),
            Known::Ratio(_) => None,
        }
    }

    /// The contents as integer expressions (floats must be integral).
    pub fn as_exprs(&self) -> Option<Vec<Expr>> {
        match self {
            Known::Int(v) => Some(v.clone()),
            Known::Float(_) => self
                .as_consts()
                .map(|v| v.into_iter().map(Expr::int).collect()),
            Known::Ratio(v) => v
                .iter()
                .map(|r| (r.exact && r.den == 1).then(|| r.num.clone()))
                .collect(),
        }
    }
}

/// What inference knows about one value.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Fact {
    pub dtype: Option<DataType>,
    /// `None` when even the rank is unknown.
    pub shape: Option<Vec<Expr>>,
    pub value: Option<Known>,
    /// Set for a sequence or optional value (ONNX `seq(...)`, `optional(...)`): its elements.
    /// `dtype` is then the elements' type and `shape` is `None`.
    pub seq: Option<Box<SeqFact>>,
}

/// Whether a packed value is an ONNX sequence or an optional (a sequence of at most one element).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqKind {
    Sequence,
    Optional,
}

/// What inference knows of a sequence or optional value. Its bytes are the sum of its elements'
/// (the executor holds one packed buffer per sequence), so they are known when every element's are.
#[derive(Clone, Debug, PartialEq)]
pub struct SeqFact {
    pub kind: SeqKind,
    /// Each element's fact, in order; `None` when the number of elements is not known.
    pub elems: Option<Vec<Fact>>,
    /// When the number of elements is symbolic (`elems` is `None`) but every element has the same
    /// fact: that number and that fact (`unbind` of a symbolic axis, a loop that appends the same
    /// shape each iteration).
    pub uniform: Option<(Expr, Fact)>,
}

impl Fact {
    pub fn new(dtype: DataType, shape: Vec<Expr>) -> Fact {
        Fact {
            dtype: Some(dtype),
            shape: Some(shape),
            value: None,
            seq: None,
        }
    }

    /// The fact of a sequence (or optional) of elements of type `dtype`.
    pub fn sequence(kind: SeqKind, dtype: Option<DataType>, elems: Option<Vec<Fact>>) -> Fact {
        Fact {
            dtype,
            shape: None,
            value: None,
            seq: Some(Box::new(SeqFact {
                kind,
                elems,
                uniform: None,
            })),
        }
    }

    /// The fact of a sequence of `len` elements that all have the fact `elem` (listed one by one
    /// when `len` is a small constant).
    pub fn uniform_sequence(len: Expr, elem: Fact) -> Fact {
        let dtype = elem.dtype;
        match len.as_const() {
            Some(n) if (0..=MAX_KNOWN_ELEMS as i64).contains(&n) => {
                Fact::sequence(SeqKind::Sequence, dtype, Some(vec![elem; n as usize]))
            }
            _ => Fact {
                dtype,
                shape: None,
                value: None,
                seq: Some(Box::new(SeqFact {
                    kind: SeqKind::Sequence,
                    elems: None,
                    uniform: Some((len, elem)),
                })),
            },
        }
    }

    /// A sequence's symbolic element count and common element fact (see [`SeqFact::uniform`]).
    pub fn uniform(&self) -> Option<(&Expr, &Fact)> {
        self.seq.as_ref()?.uniform.as_ref().map(|(len, e)| (len, e))
    }

    /// The elements of a sequence or optional fact, when their number is known.
    pub fn elems(&self) -> Option<&[Fact]> {
        self.seq.as_ref()?.elems.as_deref()
    }

    /// A fact with known contents; drops the contents when the tensor is too large to track.
    pub fn with_value(dtype: DataType, shape: Vec<Expr>, value: Known) -> Fact {
        let keep = value.len() <= MAX_KNOWN_ELEMS;
        Fact {
            dtype: Some(dtype),
            shape: Some(shape),
            value: keep.then_some(value),
            seq: None,
        }
    }

    pub fn rank(&self) -> Option<usize> {
        self.shape.as_ref().map(|s| s.len())
    }

    /// Concrete dims, when every dim is a constant.
    pub fn concrete_shape(&self) -> Option<Vec<usize>> {
        self.shape
            .as_ref()?
            .iter()
            .map(|d| d.as_const().and_then(|c| usize::try_from(c).ok()))
            .collect()
    }

    /// The dims at the symbols' values `dims`, when every dim evaluates there to a size.
    pub fn shape_at(&self, dims: &BTreeMap<String, i64>) -> Option<Vec<u64>> {
        self.shape
            .as_ref()?
            .iter()
            .map(|d| d.eval_map(dims).ok().and_then(|v| u64::try_from(v).ok()))
            .collect()
    }

    /// Element count as an expression.
    pub fn numel(&self) -> Option<Expr> {
        self.shape.as_ref().map(|s| Expr::product(s.iter()))
    }

    /// Size in bytes as an expression (for a sequence, the sum of its elements').
    pub fn bytes(&self) -> Option<Expr> {
        if let Some(s) = &self.seq {
            if let Some((len, e)) = &s.uniform {
                return Some(len.clone() * e.bytes()?);
            }
            let elems = s.elems.as_ref()?;
            let mut total = Expr::zero();
            for e in elems {
                total += e.bytes()?;
            }
            return Some(total);
        }
        let dt = self.dtype?;
        let n = self.numel()?;
        Some(match dt.bits() {
            b if b % 8 == 0 => n * Expr::int((b / 8) as i64),
            b => (n * Expr::int(b as i64)).ceil_div(&Expr::int(8)),
        })
    }

    /// Builds the fact of a constant tensor, tracking small contents.
    pub fn of_tensor(t: &TensorData) -> Fact {
        let shape: Vec<Expr> = t.dims.iter().map(|&d| Expr::int(d as i64)).collect();
        let small = t.numel() as usize <= MAX_KNOWN_ELEMS;
        let value = if !small {
            None
        } else if t.dtype.is_float() {
            t.to_f64_vec().map(Known::Float)
        } else {
            t.to_i64_vec()
                .map(|v| Known::Int(v.into_iter().map(Expr::int).collect()))
        };
        Fact {
            dtype: Some(t.dtype),
            shape: Some(shape),
            value,
            seq: None,
        }
    }
}

/// Why an op's rule could not produce facts.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum OpError {
    /// The inputs contradict the op's rules (mismatched dims, bad rank, out-of-range axis...).
    #[error("{0}")]
    Invalid(String),
    /// An attribute has the wrong kind or a bad value.
    #[error("{0}")]
    BadAttr(String),
    /// The rule needs input facts that are not known (e.g. an upstream unsupported op).
    #[error("needs unknown input facts: {0}")]
    Unknown(String),
    /// The rule does not cover this configuration.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

/// Shorthand for an `OpError::Invalid` result.
pub fn invalid<T>(msg: impl Into<String>) -> Result<T, OpError> {
    Err(OpError::Invalid(msg.into()))
}

/// What a rule sees of one node.
pub struct InferCtx<'a> {
    pub node: &'a Node,
    pub id: NodeId,
    pub inputs: Vec<Option<&'a Fact>>,
    pub opset: i64,
    symbols: &'a mut SymbolTable,
    /// The scope this node sits in (for the bodies of control-flow nodes).
    scope: Scope<'a>,
    /// What a control-flow rule learned about the node's bodies.
    control: Option<ControlFacts>,
}

/// The values visible to a graph from its enclosing scopes: each graph with its facts so far.
#[derive(Clone, Copy)]
pub struct Scope<'a> {
    pub graph: &'a Graph,
    pub values: &'a [Fact],
    pub parent: Option<&'a Scope<'a>>,
}

impl Scope<'_> {
    /// The fact of the innermost value named `name` that some scope defines (not as an outer read).
    pub fn lookup(&self, name: &str) -> Option<&Fact> {
        let own = self
            .graph
            .find_value(name)
            .filter(|v| self.graph.value(*v).kind != ValueKind::Outer)
            .and_then(|v| self.values.get(v.index()));
        own.or_else(|| self.parent.and_then(|p| p.lookup(name)))
    }
}

/// What inference knows of a control-flow node (`If`, `Loop`, `Scan`) beyond its outputs.
#[derive(Clone, Debug, Default)]
pub struct ControlFacts {
    /// The facts of each body, in the order of [`Node::subgraphs`]; empty for the branch of an
    /// `If` whose known condition rules it out.
    pub bodies: Vec<Facts>,
    /// `Loop`/`Scan`: the number of iterations (a fresh symbol when data-dependent).
    pub trips: Option<Expr>,
    /// `If`: 1 when the then-branch runs, 0 for the else-branch; a fresh 0/1 symbol when the
    /// condition is not known at inference time.
    pub branch: Option<Expr>,
}

impl<'a> InferCtx<'a> {
    /// The fact of input `i`; an error when the input is absent.
    pub fn input(&self, i: usize) -> Result<&'a Fact, OpError> {
        match self.inputs.get(i) {
            Some(Some(f)) => Ok(f),
            _ => invalid(format!("input {i} is required")),
        }
    }

    /// The fact of optional input `i`.
    pub fn opt_input(&self, i: usize) -> Option<&'a Fact> {
        self.inputs.get(i).copied().flatten()
    }

    /// Input `i`'s shape; `Unknown` when not inferred.
    pub fn shape(&self, i: usize) -> Result<&'a [Expr], OpError> {
        self.input(i)?
            .shape
            .as_deref()
            .ok_or_else(|| OpError::Unknown(format!("shape of input {i}")))
    }

    /// Input `i`'s element type; `Unknown` when not inferred.
    pub fn dtype(&self, i: usize) -> Result<DataType, OpError> {
        self.input(i)?
            .dtype
            .ok_or_else(|| OpError::Unknown(format!("type of input {i}")))
    }

    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }

    /// Known contents of input `i` as integer expressions, if known.
    pub fn known_ints(&self, i: usize) -> Option<Vec<Expr>> {
        self.opt_input(i)?.value.as_ref()?.as_exprs()
    }

    /// The value set of input `i` ([`crate::value_set::set_of`]): the element values it is
    /// proven to take, from the facts inferred so far in this node's graph.
    pub fn input_value_set(&self, i: usize) -> Option<crate::value_set::ValueSet> {
        let v = self.node.inputs.get(i).copied().flatten()?;
        crate::value_set::set_of(self.scope.graph, self.scope.values, self.opset, v)
    }

    /// Infers a body of this node with the given facts for its graph inputs (missing ones: the
    /// declared types), reading outer-scope values from this node's scope. Errors name the body
    /// node; a body node without facts makes the whole node `Unknown`.
    pub fn infer_body(&mut self, body: &Graph, inputs: &[Fact]) -> Result<Facts, OpError> {
        let scope = self.scope;
        let f = infer_scoped(
            body,
            self.opset,
            Feed::Body(inputs),
            Some(&scope),
            self.symbols,
        )
        .map_err(|e| OpError::Invalid(format!("body '{}': {e}", printable(&body.name))))?;
        if let Some(s) = f.skipped.first() {
            return Err(OpError::Unknown(format!(
                "body '{}' node {}: {}",
                printable(&body.name),
                s.label,
                s.reason
            )));
        }
        Ok(f)
    }

    /// Records what a control-flow rule learned about the node's bodies.
    pub fn set_control(&mut self, c: ControlFacts) {
        self.control = Some(c);
    }

    /// A snapshot of the symbol table, to undo the symbols of a trial body inference.
    pub fn symbols_snapshot(&self) -> SymbolTable {
        self.symbols.clone()
    }

    /// Restores a snapshot taken by [`InferCtx::symbols_snapshot`].
    pub fn symbols_restore(&mut self, s: SymbolTable) {
        *self.symbols = s;
    }

    /// A fresh data-dependent symbol, recorded with the reason. Its name is `hint` followed by the
    /// name of the node's first output (`nonzero_count_nonzero_1`): the same symbol whatever the
    /// node order, so dims given for a model hold for it written in its planned order, and name
    /// the value they size. A number follows where one node makes several.
    pub fn fresh_symbol(&mut self, hint: &str, why: &str) -> Expr {
        let node = self.node.label(self.id);
        let out = self
            .node
            .output_ids()
            .next()
            .map(|v| self.scope.graph.value(v).name.as_str())
            .filter(|n| !n.is_empty());
        let name = match out {
            Some(o) => format!("{hint}_{o}"),
            None => hint.to_string(),
        };
        self.symbols.fresh(&name, format!("{why} at node {node}"))
    }

    fn attr_value(&self, name: &str) -> Option<&'a AttrValue> {
        self.node.attr(name)
    }

    fn bad_kind<T>(&self, name: &str, want: &str, got: &AttrValue) -> Result<T, OpError> {
        Err(OpError::BadAttr(format!(
            "attribute '{name}' must be {want}, got {}",
            got.kind_name()
        )))
    }

    pub fn attr_int(&self, name: &str, default: i64) -> Result<i64, OpError> {
        match self.attr_value(name) {
            None => Ok(default),
            Some(AttrValue::Int(v)) => Ok(*v),
            Some(o) => self.bad_kind(name, "INT", o),
        }
    }

    pub fn attr_opt_int(&self, name: &str) -> Result<Option<i64>, OpError> {
        match self.attr_value(name) {
            None => Ok(None),
            Some(AttrValue::Int(v)) => Ok(Some(*v)),
            Some(o) => self.bad_kind(name, "INT", o),
        }
    }

    pub fn attr_float(&self, name: &str, default: f32) -> Result<f32, OpError> {
        match self.attr_value(name) {
            None => Ok(default),
            Some(AttrValue::Float(v)) => Ok(*v),
            Some(o) => self.bad_kind(name, "FLOAT", o),
        }
    }

    pub fn attr_ints(&self, name: &str) -> Result<Option<Vec<i64>>, OpError> {
        match self.attr_value(name) {
            None => Ok(None),
            Some(AttrValue::Ints(v)) => Ok(Some(v.clone())),
            Some(o) => self.bad_kind(name, "INTS", o),
        }
    }

    pub fn attr_floats(&self, name: &str) -> Result<Option<Vec<f32>>, OpError> {
        match self.attr_value(name) {
            None => Ok(None),
            Some(AttrValue::Floats(v)) => Ok(Some(v.clone())),
            Some(o) => self.bad_kind(name, "FLOATS", o),
        }
    }

    pub fn attr_string(&self, name: &str) -> Result<Option<String>, OpError> {
        match self.attr_value(name) {
            None => Ok(None),
            Some(AttrValue::String(v)) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
            Some(o) => self.bad_kind(name, "STRING", o),
        }
    }

    pub fn attr_tensor(&self, name: &str) -> Result<Option<&'a TensorData>, OpError> {
        match self.attr_value(name) {
            None => Ok(None),
            Some(AttrValue::Tensor(t)) => Ok(Some(t)),
            Some(o) => self.bad_kind(name, "TENSOR", o),
        }
    }

    /// The data type named by INT attribute `name` (an ONNX `TensorProto.DataType` code); `None`
    /// when absent. A code that names no type (0, undefined, among them) is an error.
    pub fn attr_dtype(&self, name: &str) -> Result<Option<DataType>, OpError> {
        self.attr_opt_int(name)?
            .map(|c| DataType::from_attr(name, c).map_err(OpError::BadAttr))
            .transpose()
    }

    /// TYPE_PROTO attribute `name`.
    pub fn attr_type(&self, name: &str) -> Result<Option<&'a crate::graph::DeclType>, OpError> {
        match self.attr_value(name) {
            None => Ok(None),
            Some(AttrValue::Type(t)) => Ok(Some(t)),
            Some(o) => self.bad_kind(name, "TYPE_PROTO", o),
        }
    }

    /// Normalizes a possibly negative axis against `rank`.
    pub fn axis(&self, axis: i64, rank: usize) -> Result<usize, OpError> {
        normalize_axis(axis, rank)
    }
}

/// Normalizes a possibly negative axis against `rank`, rejecting out-of-range axes.
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize, OpError> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r {
        return invalid(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(a as usize)
}

/// Numpy broadcasting of symbolic shapes. Two different symbolic dims broadcast to their `max`,
/// which is exact for every valid input (equal dims, or one of them 1).
pub fn broadcast(shapes: &[&[Expr]]) -> Result<Vec<Expr>, OpError> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![Expr::one(); rank];
    for s in shapes {
        let off = rank - s.len();
        for (i, d) in s.iter().enumerate() {
            let o = &out[off + i];
            out[off + i] = broadcast_dim(o, d).ok_or_else(|| {
                OpError::Invalid(format!(
                    "shapes {} cannot broadcast: dim {o} vs {d}",
                    shapes
                        .iter()
                        .map(|s| fmt_shape(s))
                        .collect::<Vec<_>>()
                        .join(" and ")
                ))
            })?;
        }
    }
    Ok(out)
}

fn broadcast_dim(a: &Expr, b: &Expr) -> Option<Expr> {
    let one = Expr::one();
    if a == b || *b == one {
        return Some(a.clone());
    }
    if *a == one {
        return Some(b.clone());
    }
    match (a.as_const(), b.as_const()) {
        (Some(_), Some(_)) => None,
        // A symbol broadcast against a constant c != 1 must equal c at run time.
        (Some(_), None) => Some(a.clone()),
        (None, Some(_)) => Some(b.clone()),
        (None, None) => Some(a.max(b)),
    }
}

/// `[N, 32, 4]` style rendering of a symbolic shape.
pub fn fmt_shape(s: &[Expr]) -> String {
    let parts: Vec<String> = s.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// A data-dependent symbol that inference introduced.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NewSymbol {
    pub name: String,
    pub reason: String,
}

/// Symbols known to the inference of one model: declared input symbols and fresh ones.
#[derive(Clone, Debug, Default)]
pub struct SymbolTable {
    pub declared: Vec<String>,
    pub introduced: Vec<NewSymbol>,
}

impl SymbolTable {
    fn taken(&self, name: &str) -> bool {
        self.declared.iter().any(|d| d == name) || self.introduced.iter().any(|s| s.name == name)
    }

    /// A fresh symbol named after `hint`, unique among the model's symbols.
    pub fn fresh(&mut self, hint: &str, reason: String) -> Expr {
        let base: String = hint
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let mut name = base.clone();
        let mut k = 1;
        while self.taken(&name) {
            k += 1;
            name = format!("{base}_{k}");
        }
        self.introduced.push(NewSymbol {
            name: name.clone(),
            reason,
        });
        Expr::data_sym(&name)
    }
}

/// A node inference could not handle; its outputs stay unknown.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Skipped {
    pub node: NodeId,
    pub label: String,
    pub reason: String,
    /// Skipped for want of known input contents or facts (not for an op without a rule).
    pub unknown_input: bool,
}

/// A declared output dim name that inference proved equal to an expression of the input symbols.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Alias {
    pub name: String,
    pub expr: String,
}

/// The result of inference over one graph.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// Indexed by `ValueId`.
    pub values: Vec<Fact>,
    pub symbols: SymbolTable,
    /// Nodes with no rule or whose rule could not run, in schedule order.
    pub skipped: Vec<Skipped>,
    /// Declared output dim names unified with inferred expressions.
    pub aliases: Vec<Alias>,
    /// The topological order used.
    pub order: Vec<NodeId>,
    /// The default-domain opset the rules ran at (op semantics, and so scratch, may depend on it).
    pub opset: i64,
    /// Control-flow nodes: their bodies' facts, trip counts and branches.
    pub control: BTreeMap<NodeId, ControlFacts>,
}

/// The facts of a node's input and output slots, in slot order (`None`: an absent optional slot,
/// or a value these facts do not cover).
pub type NodeFacts<'f> = (Vec<Option<&'f Fact>>, Vec<Option<&'f Fact>>);

impl Facts {
    pub fn get(&self, v: ValueId) -> &Fact {
        &self.values[v.index()]
    }

    /// The facts of `node`'s inputs and outputs, as op rules (shape, memory, view, cost) take them.
    pub fn node_io(&self, node: &crate::graph::Node) -> NodeFacts<'_> {
        let fact = |v: &Option<ValueId>| v.and_then(|v| self.values.get(v.index()));
        (
            node.inputs.iter().map(fact).collect(),
            node.outputs.iter().map(fact).collect(),
        )
    }
}

/// A fatal inference error: the graph is inconsistent.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum InferError {
    #[error(transparent)]
    Graph(#[from] crate::graph::GraphError),
    #[error("node {}: {}", printable(.node), printable(.msg))]
    Node { node: String, msg: String },
    #[error("graph input '{}': {}", printable(.name), printable(.msg))]
    Input { name: String, msg: String },
}

/// Infers facts for the main graph of `model`. Graph input dims named by `dim_param` become symbols;
/// unnamed unknown dims become fresh symbols named `<input>_dim<k>`.
pub fn infer_model(model: &Model) -> Result<Facts, InferError> {
    infer_graph(
        &model.graph,
        model.onnx_opset().unwrap_or(crate::ops::DEFAULT_OPSET),
    )
}

/// Infers facts for one graph at the given default-domain opset.
pub fn infer_graph(graph: &Graph, opset: i64) -> Result<Facts, InferError> {
    infer_graph_with(graph, opset, &BTreeMap::new())
}

/// [`infer_model`] with the facts of some graph inputs given by name instead of declared: a
/// sequence input's elements (the file declares only their type), or an input's exact shape.
pub fn infer_model_with(
    model: &Model,
    given: &BTreeMap<String, Fact>,
) -> Result<Facts, InferError> {
    infer_graph_with(
        &model.graph,
        model.onnx_opset().unwrap_or(crate::ops::DEFAULT_OPSET),
        given,
    )
}

/// [`infer_model`] at one point: every tensor input's symbolic dims that `dims` names are fixed at
/// those values. For a graph whose shape arithmetic has no formula over its symbols (float
/// arithmetic on sizes that is not a [`Ratio`], as torchvision's detection transform computes its
/// resize target), the facts there are what the kernels compute. The fixed symbols stay listed as
/// declared, so the same dims still name them.
pub fn infer_model_at(model: &Model, dims: &BTreeMap<String, i64>) -> Result<Facts, InferError> {
    use crate::graph::{DeclDim, TypeDecl};
    let g = &model.graph;
    let mut given = BTreeMap::new();
    // Every declared symbol, fixed or not: given facts declare none.
    let mut declared: Vec<String> = Vec::new();
    for &v in &g.inputs {
        let val = g.value(v);
        if !matches!(val.kind, crate::graph::ValueKind::Input) {
            continue;
        }
        let Some(TypeDecl::Tensor {
            elem: Some(elem),
            shape: Some(shape),
        }) = val.decl.as_ref().map(|d| &d.ty)
        else {
            continue;
        };
        let mut at = Vec::with_capacity(shape.len());
        for e in shape {
            match &e.dim {
                DeclDim::Value(x) => at.push(Expr::int(*x)),
                DeclDim::Param(p) => {
                    let e = crate::dim::declared_dim(p);
                    let fixed: BTreeMap<String, Expr> = dims
                        .iter()
                        .map(|(k, &x)| (k.clone(), Expr::int(x)))
                        .collect();
                    at.push(e.substitute_map(&fixed));
                    for s in e.symbols() {
                        if !declared.contains(&s) {
                            declared.push(s);
                        }
                    }
                }
                DeclDim::Unknown => break,
            }
        }
        if at.len() == shape.len() {
            given.insert(val.name.clone(), Fact::new(*elem, at));
        }
    }
    let mut f = infer_model_with(model, &given)?;
    for p in declared {
        if !f.symbols.declared.contains(&p) {
            f.symbols.declared.push(p);
        }
    }
    Ok(f)
}

/// Whether `facts` lack facts only for want of known input contents (shape arithmetic with no
/// formula over the symbols) and `dims` names every declared symbol: then [`infer_model_at`]
/// gives the facts at that point.
pub fn wants_point(facts: &Facts, dims: &BTreeMap<String, i64>) -> bool {
    !facts.skipped.is_empty()
        && facts.skipped.iter().all(|s| s.unknown_input)
        && facts.symbols.declared.iter().all(|d| dims.contains_key(d))
}

/// The facts to plan or run `model` at `dims`: [`infer_model`]'s, or [`infer_model_at`]'s where
/// [`wants_point`] says the symbolic ones leave nodes without facts that the point gives.
pub fn infer_model_for(model: &Model, dims: &BTreeMap<String, i64>) -> Result<Facts, InferError> {
    let f = infer_model(model)?;
    if wants_point(&f, dims) {
        infer_model_at(model, dims)
    } else {
        Ok(f)
    }
}

/// [`infer_graph`] with the facts of some graph inputs given by name (see [`infer_model_with`]).
pub fn infer_graph_with(
    graph: &Graph,
    opset: i64,
    given: &BTreeMap<String, Fact>,
) -> Result<Facts, InferError> {
    let mut symbols = SymbolTable::default();
    let mut f = infer_scoped(graph, opset, Feed::Main(given), None, &mut symbols)?;
    f.symbols = symbols;
    Ok(f)
}

/// What feeds a graph's inputs: a main graph's declared types, some given by name, or a body's
/// facts by position (from its node).
#[derive(Clone, Copy)]
enum Feed<'a> {
    Main(&'a BTreeMap<String, Fact>),
    Body(&'a [Fact]),
}

/// Inference of `graph` inside `parent` (a body), or of a main graph when `parent` is `None`.
/// `inputs` gives the facts of the graph inputs by position (a body's inputs are fed by its node);
/// inputs without one, or unknown ones, take their declared types. The returned facts' symbol
/// table is empty for a body: its symbols are the enclosing model's.
fn infer_scoped(
    graph: &Graph,
    opset: i64,
    feed: Feed,
    parent: Option<&Scope>,
    symbols: &mut SymbolTable,
) -> Result<Facts, InferError> {
    let (inputs, given) = match feed {
        Feed::Main(g) => (None, Some(g)),
        Feed::Body(f) => (Some(f), None),
    };
    let order = graph.validate()?;
    let mut values: Vec<Fact> = vec![Fact::default(); graph.values.len()];

    // Declared symbols first, so fresh names never collide with them.
    for &i in &graph.inputs {
        if let Some((_, Some(dims))) = graph.value(i).decl.as_ref().and_then(|d| d.as_tensor()) {
            for d in dims {
                if let DeclDim::Param(p) = &d.dim {
                    for s in crate::dim::declared_dim(p).symbols() {
                        if !symbols.declared.contains(&s) && inputs.is_none() {
                            symbols.declared.push(s);
                        }
                    }
                }
            }
        }
    }
    for (idx, v) in graph.values.iter().enumerate() {
        match &v.kind {
            ValueKind::Initializer(t) => values[idx] = Fact::of_tensor(t),
            ValueKind::Input => {
                let pos = graph.inputs.iter().position(|&x| x.index() == idx);
                let fed = match given {
                    Some(named) => named.get(&v.name),
                    None => inputs.and_then(|f| pos.and_then(|p| f.get(p))),
                };
                values[idx] = match fed {
                    Some(f) if f.dtype.is_some() || f.shape.is_some() || f.seq.is_some() => {
                        f.clone()
                    }
                    _ if inputs.is_some() && v.decl.is_none() => Fact::default(),
                    _ => input_fact(v, symbols)?,
                };
            }
            ValueKind::Outer => {
                if let Some(f) = parent.and_then(|p| p.lookup(&v.name)) {
                    values[idx] = f.clone();
                }
            }
            _ => {}
        }
    }
    // Initializers listed as inputs keep their constant facts (the file's default values), but their
    // contents are not folded since a caller may override them.
    for &i in &graph.inputs {
        if let ValueKind::Initializer(_) = graph.value(i).kind {
            values[i.index()].value = None;
        }
    }

    let mut control = BTreeMap::new();
    let mut skipped = Vec::new();
    for &nid in &order {
        let node = graph.node(nid);
        let label = node.label(nid);
        let outs = {
            let inputs: Vec<Option<&Fact>> = node
                .inputs
                .iter()
                .map(|i| i.map(|v| &values[v.index()]))
                .collect();
            let rule = crate::ops::lookup(node);
            let present = node
                .inputs
                .iter()
                .rposition(|i| i.is_some())
                .map_or(0, |p| p + 1);
            let required = node.inputs.iter().take_while(|i| i.is_some()).count();
            let arity = rule.map(|d| d.arity);
            match rule {
                Some(_) if arity.is_some_and(|(lo, hi)| required < lo || present > hi) => {
                    let (lo, hi) = arity.unwrap_or((0, 0));
                    let want = if hi == usize::MAX {
                        format!("at least {lo}")
                    } else if lo == hi {
                        format!("{lo}")
                    } else {
                        format!("{lo} to {hi}")
                    };
                    Err(OpError::Invalid(format!(
                        "{} takes {want} inputs, got {present} (the first {required} present)",
                        node.op
                    )))
                }
                None => Err(OpError::Unsupported(format!(
                    "no rule for op {}{}",
                    if node.is_onnx_domain() {
                        String::new()
                    } else {
                        format!("{}.", node.domain)
                    },
                    node.op
                ))),
                Some(def) => {
                    let introduced = symbols.introduced.len();
                    let mut ctx = InferCtx {
                        node,
                        id: nid,
                        inputs,
                        opset,
                        symbols: &mut *symbols,
                        scope: Scope {
                            graph,
                            values: &values,
                            parent,
                        },
                        control: None,
                    };
                    let mut res = (def.infer)(&mut ctx);
                    if let Some(c) = ctx.control.take() {
                        control.insert(nid, c);
                    }
                    if let Ok(outs) = res.as_mut() {
                        if crate::fold::fold_node(node, opset, &ctx.inputs, outs) {
                            // Concrete values replace any data-dependent symbol the rule made.
                            symbols.introduced.truncate(introduced);
                        }
                    }
                    res
                }
            }
        };
        match outs {
            Ok(facts) => {
                for (slot, out) in node.outputs.iter().enumerate() {
                    if let (Some(v), Some(f)) = (out, facts.get(slot)) {
                        values[v.index()] = f.clone();
                    }
                }
            }
            Err(OpError::Invalid(msg)) | Err(OpError::BadAttr(msg)) => {
                return Err(InferError::Node { node: label, msg });
            }
            Err(e @ OpError::Unknown(_)) | Err(e @ OpError::Unsupported(_)) => {
                skipped.push(Skipped {
                    node: nid,
                    label,
                    unknown_input: matches!(e, OpError::Unknown(_)),
                    reason: e.to_string(),
                });
                // Outputs keep what the file declares, with declared symbols only.
                for v in node.output_ids() {
                    values[v.index()] = declared_fact(graph, v, symbols);
                }
            }
        }
    }

    let aliases = if parent.is_none() {
        unify_declared_outputs(graph, &values, symbols)
    } else {
        Vec::new()
    };
    Ok(Facts {
        values,
        symbols: SymbolTable::default(),
        skipped,
        aliases,
        order,
        opset,
        control,
    })
}

fn input_fact(v: &crate::graph::Value, symbols: &mut SymbolTable) -> Result<Fact, InferError> {
    let Some(decl) = &v.decl else {
        return Err(InferError::Input {
            name: crate::graph::printable(&v.name).into_owned(),
            msg: "has no declared type".into(),
        });
    };
    let Some((elem, dims)) = decl.as_tensor() else {
        return Ok(declared_seq_fact(decl).unwrap_or_default());
    };
    let shape = dims.map(|dims| {
        dims.iter()
            .enumerate()
            .map(|(k, d)| match &d.dim {
                DeclDim::Value(c) => Expr::int(*c),
                DeclDim::Param(p) => crate::dim::declared_dim(p),
                DeclDim::Unknown => symbols.fresh(
                    &format!("{}_dim{k}", v.name),
                    format!("graph input '{}' leaves dim {k} unnamed", v.name),
                ),
            })
            .collect()
    });
    Ok(Fact {
        dtype: elem,
        shape,
        value: None,
        seq: None,
    })
}

/// The fact of a value declared as a sequence or optional: its element type, an unknown number of
/// elements (a graph input's elements are known only from the value fed, see [`infer_model_with`]).
pub(crate) fn declared_seq_fact(decl: &crate::graph::DeclType) -> Option<Fact> {
    use crate::graph::TypeDecl;
    let (kind, elem) = match &decl.ty {
        TypeDecl::Sequence(e) => (SeqKind::Sequence, e),
        TypeDecl::Optional(e) => (SeqKind::Optional, e),
        _ => return None,
    };
    let dtype = elem.as_deref().and_then(|e| match e.as_tensor() {
        Some((t, _)) => t,
        None => declared_seq_fact(e).and_then(|f| f.dtype),
    });
    Some(Fact::sequence(kind, dtype, None))
}

fn declared_fact(graph: &Graph, v: ValueId, symbols: &SymbolTable) -> Fact {
    let Some(decl) = graph.value(v).decl.as_ref() else {
        return Fact::default();
    };
    let Some((elem, dims)) = decl.as_tensor() else {
        return declared_seq_fact(decl).unwrap_or_default();
    };
    let shape = dims.and_then(|dims| {
        dims.iter()
            .map(|d| match &d.dim {
                DeclDim::Value(c) => Some(Expr::int(*c)),
                DeclDim::Param(p) => {
                    let e = crate::dim::declared_dim(p);
                    e.symbols()
                        .iter()
                        .all(|s| symbols.declared.contains(s))
                        .then_some(e)
                }
                _ => None,
            })
            .collect::<Option<Vec<Expr>>>()
    });
    Fact {
        dtype: elem,
        shape,
        value: None,
        seq: None,
    }
}

/// Declared dim names on graph outputs and value_info (e.g. `Addz_out_dim_1` from legacy exports) that
/// are not input symbols are matched to the inferred dims; each distinct name is reported once.
/// Whether a declared dim name is itself a spelling of `e` (dynamo exports name dims `B*S` or
/// `Min(2048, S)`): such a name is no alias worth reporting.
fn spells(name: &str, e: &Expr) -> bool {
    &crate::dim::declared_dim(name) == e
}

fn unify_declared_outputs(graph: &Graph, values: &[Fact], symbols: &SymbolTable) -> Vec<Alias> {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for &v in graph.outputs.iter().chain(graph.value_info.iter()) {
        let Some((_, Some(dims))) = graph.value(v).decl.as_ref().and_then(|d| d.as_tensor()) else {
            continue;
        };
        let Some(shape) = &values[v.index()].shape else {
            continue;
        };
        if shape.len() != dims.len() {
            continue;
        }
        for (d, e) in dims.iter().zip(shape) {
            if let DeclDim::Param(p) = &d.dim {
                if !symbols.declared.contains(p) && !seen.contains_key(p) && !spells(p, e) {
                    seen.insert(p.clone(), e.to_string());
                    order.push(p.clone());
                }
            }
        }
    }
    order
        .into_iter()
        .map(|name| Alias {
            expr: seen[&name].clone(),
            name,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dim_names_that_spell_their_expression_are_not_aliases() {
        let bs = Expr::sym("B") * Expr::sym("S");
        assert!(spells("B*S", &bs));
        assert!(spells("S*B", &bs));
        let m = Expr::min_of(&[Expr::sym("S"), Expr::from(2048)]).unwrap();
        assert!(spells("Min(2048, S)", &m));
        assert!(!spells("Addz_out_dim_1", &Expr::sym("N")));
        assert!(!spells("B*S", &Expr::sym("B")));
    }
}
