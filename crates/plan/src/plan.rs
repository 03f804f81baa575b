//! The [`Plan`]: a plain value the planner makes, the checker verifies and the executor consumes.
//!
//! A plan is made for concrete dims. Nodes are named by their index in the graph the plan is for
//! (plus name and op, checked); values by their ONNX name, which is stable across save and import.
//! Steps count from 0: step `s` runs `schedule[s]`.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};

/// One step of the schedule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// Node index in the graph.
    pub node: u32,
    /// The node's name (may be empty) and op, to catch a plan applied to another graph.
    pub name: String,
    pub op: String,
}

/// What a planned buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BufferKind {
    /// A node output read by later nodes.
    Activation,
    /// Holds a graph output: lives to the end.
    Output,
    /// A node's scratch, live during its step only.
    Scratch,
}

/// One buffer in the arena.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Buffer {
    pub kind: BufferKind,
    /// The value that owns the bytes first, then the views of it (in node order). Empty for scratch.
    pub values: Vec<String>,
    /// For scratch: the node (graph index) that uses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    pub offset: u64,
    pub size: u64,
    /// First and last step during which it is live.
    pub first: usize,
    pub last: usize,
}

/// Output 0 of `node` is written over the buffer of its input `input`, which dies there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InPlace {
    pub node: u32,
    pub input: String,
    pub output: String,
}

/// A `Concat` assembled in place: each input is written by its producer straight into its part of
/// the output's buffer, and the node itself copies nothing. The output's buffer lists the inputs
/// among its values and lives from the first input's step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assembled {
    /// The `Concat` node (graph index).
    pub node: u32,
    pub output: String,
    /// The node's inputs in order, each at its byte offset in the output.
    pub parts: Vec<Part>,
}

/// One input of an assembled `Concat`: where it sits in the output's buffer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    pub value: String,
    /// Offset from the start of the output's buffer.
    pub offset: u64,
    pub size: u64,
}

/// A buffer moved to the host tier while it is idle. Its last use before the gap is step
/// `out_after`, its next use step `in_before`; nothing reads it in between. The copies are
/// asynchronous, beside the compute steps:
/// - the copy to the host starts after step `out_after` and is complete after step `out_done`
///   (`out_after <= out_done`; equal: copied before the next step runs). Its device range (the
///   buffer's `offset`) stays reserved through `out_done`, while the copy reads it;
/// - the copy back starts before step `in_start` into the device range at `offset`, reserved from
///   `in_start` on, and is complete before step `in_before` (`in_start <= in_before`; equal:
///   copied just before its reader). It starts only once the copy out is complete:
///   `out_done < in_start`.
///
/// The host holds its copy over steps `out_after + 1..=in_before`. ONNX cannot say where a tensor
/// lives, so the plan does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offload {
    /// The buffer's value (it has no views and takes part in no in-place reuse or assembly).
    pub value: String,
    pub out_after: usize,
    pub out_done: usize,
    pub in_start: usize,
    pub in_before: usize,
    /// Device offset from `in_start` on (the buffer's `offset` holds through `out_done`).
    pub offset: u64,
    pub size: u64,
}

/// The plan of a control-flow node's body, which it runs from an arena of its own, allocated once
/// for all its iterations (see [`crate::body`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BodyPlan {
    /// The node, as [`Step::node`].
    pub node: u32,
    pub plan: Plan,
    /// Iterations run side by side, each lane with its own copy of what `plan` holds (its arena,
    /// its scanned slices, its constants) and taking the next iteration when it is done with one;
    /// 1: one iteration after the other. Every iteration computes what it computes alone, so
    /// outputs do not depend on the lanes, and the lanes are held whether or not there are
    /// threads to run them, so the peak does not depend on the thread count.
    #[serde(default = "one_lane", skip_serializing_if = "is_one_lane")]
    pub lanes: u32,
}

impl BodyPlan {
    /// What the node holds beside the enclosing arena while it runs: each lane's
    /// [`heap_of`](crate::body::heap_of) its plan.
    pub fn heap(&self) -> u64 {
        u64::from(self.lanes.max(1)) * crate::body::heap_of(&self.plan)
    }
}

fn one_lane() -> u32 {
    1
}

fn is_one_lane(x: &u32) -> bool {
    *x == 1
}

/// A memory plan at concrete dims.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The dims the plan was made for.
    pub dims: BTreeMap<String, i64>,
    pub schedule: Vec<Step>,
    /// Arena buffers, by first step, then by owner value order.
    pub buffers: Vec<Buffer>,
    pub inplace: Vec<InPlace>,
    /// Concatenations assembled in place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub assembled: Vec<Assembled>,
    /// Every offset is a multiple of this.
    pub align: u64,
    /// The arena: the highest `offset + size`.
    pub arena_bytes: u64,
    /// Weights and graph inputs, held outside the arena.
    pub resident_bytes: u64,
    /// Control-flow bodies (`If`, `Loop`, `Scan`) run on the heap beside the arena: the most one
    /// node holds there, its bodies' peak plus its outputs, made on the heap and then copied into
    /// their arena buffers (a body run from a plan of its own, [`Plan::bodies`], holds that plan's
    /// `arena_bytes + resident_bytes + heap_bytes`). Such a node has no arena scratch. The run's
    /// peak is `arena_bytes + resident_bytes + heap_bytes`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub heap_bytes: u64,
    /// Control-flow bodies run from plans of their own (see [`crate::body`]), by node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bodies: Vec<BodyPlan>,
    /// Buffers moved to the host tier while idle (two tiers: the arena is the device tier).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub offloads: Vec<Offload>,
    /// The most bytes the host tier holds at once.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub host_bytes: u64,
    /// The device budget the plan was made for: `arena_bytes + resident_bytes + heap_bytes` (the
    /// device tier's peak) may not exceed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_budget: Option<u64>,
}

/// Whether a count is zero (a field serialized only when set).
pub(crate) fn is_zero<T: Default + PartialEq>(x: &T) -> bool {
    *x == T::default()
}

impl Plan {
    /// The plan as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Reads a plan from JSON.
    pub fn from_json(s: &str) -> Result<Plan, serde_json::Error> {
        serde_json::from_str(s)
    }

    /// The same plan for the graph whose node `i` is `schedule[i]` of this plan's graph (the graph
    /// `optimize` writes): node indices are renumbered, nothing else changes.
    pub fn renumbered_in_schedule_order(&self) -> Plan {
        let n = self.schedule.len();
        let mut new_id = vec![u32::MAX; n];
        for (s, st) in self.schedule.iter().enumerate() {
            if let Some(x) = new_id.get_mut(st.node as usize) {
                *x = s as u32;
            }
        }
        let map = |v: u32| new_id.get(v as usize).copied().unwrap_or(v);
        let mut p = self.clone();
        for (s, st) in p.schedule.iter_mut().enumerate() {
            st.node = s as u32;
        }
        for b in &mut p.buffers {
            b.node = b.node.map(map);
        }
        for ip in &mut p.inplace {
            ip.node = map(ip.node);
        }
        for a in &mut p.assembled {
            a.node = map(a.node);
        }
        for b in &mut p.bodies {
            b.node = map(b.node);
        }
        p
    }

    /// The schedule as node ids.
    pub fn node_order(&self) -> Vec<memplan_ir::NodeId> {
        self.schedule
            .iter()
            .map(|s| memplan_ir::NodeId(s.node))
            .collect()
    }

    /// The plan node `node`'s body runs from, if it has one.
    pub fn body(&self, node: u32) -> Option<&BodyPlan> {
        self.bodies.iter().find(|b| b.node == node)
    }

    /// A text rendering for reports and snapshot tests.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let dims: Vec<String> = self.dims.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            s,
            "plan at {}: {} steps, {} buffers, arena {} B, resident {} B, align {}",
            if dims.is_empty() {
                "no dims".to_string()
            } else {
                dims.join(" ")
            },
            self.schedule.len(),
            self.buffers.len(),
            self.arena_bytes,
            self.resident_bytes,
            self.align
        );
        let label = |node: u32| -> String {
            match self.schedule.iter().find(|st| st.node == node) {
                Some(st) if !st.name.is_empty() => format!("{} ({})", st.name, st.op),
                Some(st) => format!("#{} ({})", st.node, st.op),
                None => format!("#{node}"),
            }
        };
        s.push_str("schedule\n");
        for (i, st) in self.schedule.iter().enumerate() {
            let _ = writeln!(s, "  {i:>4}  {}", label(st.node));
        }
        s.push_str("buffers (offset, size, steps, values)\n");
        for b in &self.buffers {
            let what = match b.kind {
                BufferKind::Scratch => format!("scratch of {}", label(b.node.unwrap_or(u32::MAX))),
                BufferKind::Output => format!("{} [output]", b.values.join(" = ")),
                BufferKind::Activation => b.values.join(" = "),
            };
            let _ = writeln!(
                s,
                "  {:>10} {:>10}  {:>4}..{:<4}  {what}",
                b.offset, b.size, b.first, b.last
            );
        }
        if !self.inplace.is_empty() {
            s.push_str("in place\n");
            for ip in &self.inplace {
                let _ = writeln!(s, "  {}: {} over {}", label(ip.node), ip.output, ip.input);
            }
        }
        if !self.assembled.is_empty() {
            s.push_str("assembled in place\n");
            for a in &self.assembled {
                let parts: Vec<String> = a
                    .parts
                    .iter()
                    .map(|p| format!("{} @{}", p.value, p.offset))
                    .collect();
                let _ = writeln!(
                    s,
                    "  {}: {} = [{}]",
                    label(a.node),
                    a.output,
                    parts.join(", ")
                );
            }
        }
        if !self.offloads.is_empty() {
            let _ = writeln!(
                s,
                "host tier ({} B at most; copies out after..done, back start..before)",
                self.host_bytes
            );
            for o in &self.offloads {
                let _ = writeln!(
                    s,
                    "  {} ({} B): out {}..{}, back {}..{} at {}",
                    o.value, o.size, o.out_after, o.out_done, o.in_start, o.in_before, o.offset
                );
            }
        }
        for b in &self.bodies {
            let how = match b.lanes {
                0 | 1 => "its own arena, reused by every iteration".to_string(),
                l => format!("{l} lanes, each with its own arena, reused by its iterations"),
            };
            let _ = writeln!(s, "body of {} ({how})", label(b.node));
            for line in b.plan.render().lines() {
                let _ = writeln!(s, "  {line}");
            }
        }
        s
    }
}
