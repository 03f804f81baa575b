//! memplan-sim: buffer lifetimes and peak memory over a fixed schedule.
//!
//! Mechanism only: [`Timeline::build`] turns (graph, facts, schedule) into buffers with symbolic sizes
//! and alloc/free steps; [`peak`] evaluates the live bytes over the steps, symbolically or at given
//! dims; [`place`] assigns arena offsets. Schedulers and rewrites live in `plan`.

pub mod control;
pub mod estimate;
pub mod formula;
pub mod peak;
pub mod place;
pub mod synth;
pub mod timeline;

pub use peak::{Breakdown, ConcretePeak, LiveEntry};
pub use place::{place_best_fit, Placement};
pub use timeline::{BufId, Buffer, Category, Event, SimError, Timeline};
