//! The host tier of a planned run: copies of offloaded values (see [`memplan_plan::Offload`]),
//! made and put back by one dedicated copier thread while the compute thread runs its steps.
//!
//! The interpreter starts each copy at the step the plan says and waits for it at the step the plan
//! says it is complete: a copy out starts after the value's last use before the gap (the value
//! leaves the compute thread's hands) and is waited for after step `out_done`; a copy back starts
//! before step `in_start` and is waited for before step `in_before`, whose reader then gets the
//! value at its new device range. The copier runs one copy at a time, in the order they start (as
//! the plan's prediction assumes). It is an OS thread of its own, so copies never wait behind (nor
//! hold up) kernels on the rayon pool. A copy the plan waits for as soon as it starts (no step
//! beside it) is made by the compute thread itself: handing it over would only add the copier's
//! wake-up to the wait.
//!
//! **Invariant** (what makes the copier's arena access sound): the plan has passed
//! `memplan_plan::check`, whose rule 8 reserves a copy out's device range through `out_done` and a
//! copy back's from `in_start`, and whose rule 4 keeps every other buffer live at those steps off
//! those ranges; nothing reads the value between `out_after` and `in_before`. So while a copy back
//! writes its range, nothing else reads or writes any byte of it, and while a copy out reads the
//! value's range, nothing writes it (the value is frozen, takes part in no in-place reuse, and the
//! compute thread holds no handle to it).
//!
//! The host tier's bytes are counted apart from the device tier (the arena and resident tensors
//! that `MemStats` measures): from the start of a copy out to the end of the step that reads the
//! value again, as the plan's `host_bytes` counts them.

use std::collections::BTreeMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use memplan_ir::graph::ValueId;
use memplan_ir::DataType;

use crate::arena::Arena;
use crate::tensor::{SeqLayout, Tensor};

/// One copy for the copier thread.
enum Job {
    /// Copy the tensor's bytes to host memory, then drop the tensor.
    Out(Tensor),
    /// Write `bytes` at `offset` of `arena` (in bounds).
    Back {
        bytes: Vec<u8>,
        arena: Arc<Arena>,
        offset: usize,
    },
}

/// A finished copy: the host bytes (made by a copy out, or given back by a copy back) and the
/// copy's own time in nanoseconds.
type Done = (Vec<u8>, u64);

/// The copier thread, and the finished copies the compute thread has not waited for yet.
struct Copier {
    jobs: Option<Sender<(u64, Job)>>,
    done: Receiver<(u64, Done)>,
    finished: BTreeMap<u64, Done>,
    next: u64,
    thread: Option<JoinHandle<()>>,
}

impl Copier {
    fn start() -> Result<Copier, String> {
        let (jobs, rx) = channel::<(u64, Job)>();
        let (tx, done) = channel::<(u64, Done)>();
        let thread = std::thread::Builder::new()
            .name("memplan-copier".into())
            .spawn(move || {
                for (id, job) in rx {
                    let start = Instant::now();
                    let bytes = match job {
                        Job::Out(t) => t.bytes().to_vec(),
                        Job::Back {
                            bytes,
                            arena,
                            offset,
                        } => {
                            // SAFETY: the range is in bounds (checked by `HostTier::back_start`)
                            // and, until the compute thread has waited for this copy, reached by
                            // nothing else (module invariant).
                            unsafe { arena.range_mut(offset, bytes.len()) }.copy_from_slice(&bytes);
                            bytes
                        }
                    };
                    let nanos = start.elapsed().as_nanos() as u64;
                    if tx.send((id, (bytes, nanos))).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| format!("cannot start the copier thread: {e}"))?;
        Ok(Copier {
            jobs: Some(jobs),
            done,
            finished: BTreeMap::new(),
            next: 0,
            thread: Some(thread),
        })
    }

    /// Queues `job`; its ticket for [`Copier::wait`].
    fn send(&mut self, job: Job) -> Result<u64, String> {
        let id = self.next;
        self.next += 1;
        self.jobs
            .as_ref()
            .and_then(|j| j.send((id, job)).ok())
            .ok_or("the copier thread has stopped")?;
        Ok(id)
    }

    /// Waits until the copy `id` is finished; its result.
    fn wait(&mut self, id: u64) -> Result<Done, String> {
        while let Ok((i, d)) = self.done.try_recv() {
            self.finished.insert(i, d);
        }
        if let Some(d) = self.finished.remove(&id) {
            return Ok(d);
        }
        loop {
            let (i, d) = self
                .done
                .recv()
                .map_err(|_| "the copier thread has stopped")?;
            if i == id {
                return Ok(d);
            }
            self.finished.insert(i, d);
        }
    }
}

impl Drop for Copier {
    /// Lets the copier finish what it was given (a copy back writes the arena, which it keeps alive
    /// through its `Arc`) and joins it.
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Where an offloaded value is.
enum State {
    /// Being copied out (ticket).
    Out(u64),
    /// On the host.
    Host(Vec<u8>),
    /// Being copied back to `(offset, len)` of the arena (ticket; `None`: copied already).
    Back(Option<u64>, usize, usize),
    /// Copied back; the host copy is released after the reader's step.
    Returned,
}

/// An offloaded value: what it is, how many bytes, and where they are.
struct Held {
    dtype: DataType,
    shape: Vec<usize>,
    seq: Option<Arc<SeqLayout>>,
    len: usize,
    state: State,
}

/// The host tier of a planned run (see the module docs).
#[derive(Default)]
pub(crate) struct HostTier {
    copier: Option<Copier>,
    held: BTreeMap<ValueId, Held>,
    now: u64,
    /// The most bytes held at once.
    pub peak: u64,
    /// Copies made (out and back), the bytes they moved, their time on the copier thread, and the
    /// time the compute thread waited for them, in nanoseconds.
    pub transfers: usize,
    pub bytes: u64,
    pub copy_nanos: u64,
    pub wait_nanos: u64,
}

impl HostTier {
    /// Starts the copier thread now rather than at the first copy (whose window would then hold
    /// the thread's start).
    pub fn start(&mut self) -> Result<(), String> {
        self.copier().map(|_| ())
    }

    fn copier(&mut self) -> Result<&mut Copier, String> {
        if self.copier.is_none() {
            self.copier = Some(Copier::start()?);
        }
        self.copier.as_mut().ok_or_else(|| "no copier".to_string())
    }

    /// Waits for the copy `id`, counting its time and the wait (a copy already finished costs the
    /// wait the look at the finished copies takes).
    fn wait(&mut self, id: u64) -> Result<Vec<u8>, String> {
        let start = Instant::now();
        let (bytes, nanos) = self.copier()?.wait(id)?;
        self.wait_nanos += start.elapsed().as_nanos() as u64;
        self.copy_nanos += nanos;
        Ok(bytes)
    }

    /// Makes a copy on the compute thread (a synchronous one: the plan waits for it right away),
    /// counting its whole time as copy time and as time waited.
    fn inline<R>(&mut self, copy: impl FnOnce() -> R) -> R {
        let start = Instant::now();
        let r = copy();
        let nanos = start.elapsed().as_nanos() as u64;
        self.copy_nanos += nanos;
        self.wait_nanos += nanos;
        r
    }

    /// Starts copying `t` (the value `v`) to host memory; from now on the compute thread does not
    /// hold it. `inline`: the plan waits for it right away (a synchronous copy), so the compute
    /// thread copies it itself instead of handing it over and waiting; its time is all waited.
    pub fn out_start(&mut self, v: ValueId, t: Tensor, inline: bool) -> Result<(), String> {
        if self.held.contains_key(&v) {
            return Err("it is already on the host".into());
        }
        let len = t.bytes().len();
        let (dtype, shape, seq) = (t.dtype, t.shape.clone(), t.seq.clone());
        let state = if inline {
            State::Host(self.inline(|| {
                let bytes = t.bytes().to_vec();
                drop(t);
                bytes
            }))
        } else {
            State::Out(self.copier()?.send(Job::Out(t))?)
        };
        self.transfers += 1;
        self.bytes += len as u64;
        self.now += len as u64;
        self.peak = self.peak.max(self.now);
        self.held.insert(
            v,
            Held {
                dtype,
                shape,
                seq,
                len,
                state,
            },
        );
        Ok(())
    }

    /// Waits for the copy out of `v`.
    pub fn out_join(&mut self, v: ValueId) -> Result<(), String> {
        let id = match self.held.get(&v).map(|h| &h.state) {
            Some(State::Out(id)) => *id,
            Some(State::Host(_)) => return Ok(()),
            _ => return Err("it is not being copied out".into()),
        };
        let bytes = self.wait(id)?;
        if let Some(h) = self.held.get_mut(&v) {
            h.state = State::Host(bytes);
        }
        Ok(())
    }

    /// Starts copying `v` back to the device range `(off, len)` of `arena`; `inline` as for
    /// [`HostTier::out_start`].
    pub fn back_start(
        &mut self,
        v: ValueId,
        arena: &Arc<Arena>,
        (off, len): (usize, usize),
        inline: bool,
    ) -> Result<(), String> {
        let h = self.held.get_mut(&v).ok_or("it is not on the host")?;
        if h.len != len {
            return Err(format!("{} B on the host, {len} B planned", h.len));
        }
        if off.checked_add(len).is_none_or(|e| e > arena.len()) {
            return Err(format!(
                "its device range {off}+{len} is outside the arena of {} B",
                arena.len()
            ));
        }
        let bytes = match std::mem::replace(&mut h.state, State::Returned) {
            State::Host(b) => b,
            other => {
                h.state = other;
                return Err("it is not on the host (its copy out was not waited for)".into());
            }
        };
        let ticket = if inline {
            // SAFETY: in bounds (checked above); from this step on the range is the value's, and
            // nothing else reaches it (module invariant).
            self.inline(|| unsafe { arena.range_mut(off, len) }.copy_from_slice(&bytes));
            None
        } else {
            Some(self.copier()?.send(Job::Back {
                bytes,
                arena: arena.clone(),
                offset: off,
            })?)
        };
        self.transfers += 1;
        self.bytes += len as u64;
        if let Some(h) = self.held.get_mut(&v) {
            h.state = State::Back(ticket, off, len);
        }
        Ok(())
    }

    /// Waits for the copy back of `v`; the value at its device range.
    pub fn back_join(&mut self, v: ValueId, arena: &Arc<Arena>) -> Result<Tensor, String> {
        let (ticket, off, len) = match self.held.get(&v).map(|h| &h.state) {
            Some(State::Back(ticket, off, len)) => (*ticket, *off, *len),
            _ => return Err("it is not being copied back".into()),
        };
        // The host bytes are dropped now; the tier counts them until `release`.
        if let Some(id) = ticket {
            self.wait(id)?;
        }
        let h = self.held.get_mut(&v).ok_or("it is not on the host")?;
        h.state = State::Returned;
        let mut t = Tensor::arena_range(h.dtype, &h.shape, arena.clone(), off, len, false);
        t.seq = h.seq.clone();
        Ok(t)
    }

    /// Releases the host copy of `v` (copied back before the step just run).
    pub fn release(&mut self, v: ValueId) {
        if let Some(h) = self.held.remove(&v) {
            self.now -= h.len as u64;
        }
    }
}
