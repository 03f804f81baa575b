//! Tensor memory: 64-byte-aligned buffers counted per run, and a process-wide counting allocator.
//!
//! Every tensor buffer and every kernel scratch buffer of a run is a [`Buf`] charged to that run's
//! [`MemStats`]; dropping the buffer credits it back. The counter's peak is the measured tensor-memory
//! peak that the estimate predicts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::arena::{self, Arena, Cursor};

/// Alignment of every buffer.
pub const BUF_ALIGN: usize = 64;

/// Current and peak bytes of one run's tensor memory.
#[derive(Debug, Default)]
pub struct MemStats {
    current: AtomicU64,
    peak: AtomicU64,
    /// Kernel scratch held now, and its high-water mark since [`MemStats::take_scratch_high`].
    scratch_now: AtomicU64,
    scratch_high: AtomicU64,
    /// In a planned run, the arena ranges the current node's op may take (see [`crate::arena`]).
    pub(crate) cursor: Mutex<Cursor>,
    /// The run's stats, which every charge and credit also goes to: a lane of a body run side by
    /// side with others has a cursor of its own but counts toward the run's peak.
    parent: Option<Arc<MemStats>>,
}

impl MemStats {
    pub fn new() -> Arc<MemStats> {
        Arc::new(MemStats::default())
    }

    /// Stats with a cursor of their own whose charges and credits also go to `parent`.
    pub(crate) fn child(parent: &Arc<MemStats>) -> Arc<MemStats> {
        Arc::new(MemStats {
            parent: Some(parent.clone()),
            ..MemStats::default()
        })
    }

    /// Charges `n` bytes.
    pub fn add(&self, n: u64) {
        let now = self.current.fetch_add(n, Ordering::Relaxed) + n;
        self.peak.fetch_max(now, Ordering::Relaxed);
        if let Some(p) = &self.parent {
            p.add(n);
        }
    }

    /// Credits `n` bytes back.
    pub fn sub(&self, n: u64) {
        self.current.fetch_sub(n, Ordering::Relaxed);
        if let Some(p) = &self.parent {
            p.sub(n);
        }
    }

    pub fn current(&self) -> u64 {
        self.current.load(Ordering::Relaxed)
    }

    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// The most kernel scratch held at once since the last call, which restarts the count from
    /// the scratch held now. The interpreter calls it around each node to compare the kernel's
    /// scratch with the op table's rule.
    pub fn take_scratch_high(&self) -> u64 {
        let now = self.scratch_now.load(Ordering::Relaxed);
        self.scratch_high.swap(now, Ordering::Relaxed)
    }

    fn scratch_add(&self, n: u64) {
        let now = self.scratch_now.fetch_add(n, Ordering::Relaxed) + n;
        self.scratch_high.fetch_max(now, Ordering::Relaxed);
    }

    fn scratch_sub(&self, n: u64) {
        self.scratch_now.fetch_sub(n, Ordering::Relaxed);
    }
}

/// Buffers at least this large are mapped from the kernel directly ([`map_buf`]) and reused from
/// its pool, instead of going through the global allocator. glibc maps such sizes afresh and
/// unmaps them on free until its adaptive threshold rises, so each node of an unplanned run that
/// made a 256 KiB tensor paid 64 page faults of fresh memory (150-230 µs on this VM, against
/// 10-20 µs for the kernel itself).
const MAP_MIN: usize = 64 << 10;

/// A zero-initialized, 64-byte-aligned heap buffer charged to a [`MemStats`] while it lives.
#[derive(Debug)]
pub struct Buf {
    ptr: NonNull<u8>,
    len: usize,
    /// Allocated by [`map_buf`] (freed by [`unmap`]) rather than the global allocator.
    mapped: bool,
    stats: Option<Arc<MemStats>>,
}

// SAFETY: `Buf` owns its allocation exclusively; shared access goes through `&Buf` (read-only) and
// mutable access through `&mut Buf`, so the usual aliasing rules make it thread-safe.
unsafe impl Send for Buf {}
// SAFETY: see above; `&Buf` only gives read access to the bytes.
unsafe impl Sync for Buf {}

/// Allocation failed (the size overflows or the system refused it).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot allocate {0} bytes")]
pub struct AllocError(pub usize);

impl Buf {
    /// Allocates `len` zeroed bytes charged to `stats` (if any).
    pub fn zeroed(len: usize, stats: Option<&Arc<MemStats>>) -> Result<Buf, AllocError> {
        Buf::new(len, stats, true)
    }

    /// Allocates `len` bytes charged to `stats` (if any) for a caller that overwrites all of them:
    /// they are zeros or, in a reused mapped buffer, stale bytes of an earlier buffer (initialized
    /// memory either way, never read before being written by such a caller).
    pub fn for_overwrite(len: usize, stats: Option<&Arc<MemStats>>) -> Result<Buf, AllocError> {
        Buf::new(len, stats, false)
    }

    fn new(len: usize, stats: Option<&Arc<MemStats>>, zero: bool) -> Result<Buf, AllocError> {
        let mut mapped = false;
        let ptr = if len == 0 {
            // A dangling, well-aligned pointer for empty buffers; never dereferenced for reads beyond 0.
            NonNull::new(BUF_ALIGN as *mut u8).ok_or(AllocError(len))?
        } else if let Some(p) = map_buf(len, zero) {
            mapped = true;
            p
        } else {
            let layout = Layout::from_size_align(len, BUF_ALIGN).map_err(|_| AllocError(len))?;
            // SAFETY: `layout` has non-zero size.
            let p = unsafe { std::alloc::alloc_zeroed(layout) };
            NonNull::new(p).ok_or(AllocError(len))?
        };
        if let Some(s) = stats {
            s.add(len as u64);
        }
        Ok(Buf {
            ptr,
            len,
            mapped,
            stats: stats.cloned(),
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The start of the allocation (dangling when empty).
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` initialized (zeroed or written) bytes, or dangling with len 0.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: mapped by `map_buf(self.len, _)`, which returned this pointer.
            unsafe { unmap(self.ptr, self.len) };
        } else if self.len > 0 {
            if let Ok(layout) = Layout::from_size_align(self.len, BUF_ALIGN) {
                // SAFETY: allocated in `zeroed` with this exact layout.
                unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
            }
        }
        if let Some(s) = &self.stats {
            s.sub(self.len as u64);
        }
    }
}

/// Huge-page size (x86-64 transparent huge pages).
const HUGE: usize = 2 << 20;
/// Freed mapped buffers kept for reuse, at most this many bytes in all.
const POOL_MAX: usize = 1 << 30;
/// ... and at most this many buffers, each a mapping of its own: far below the kernel's default
/// limit of 65530 mappings per process.
const POOL_BUFFERS_MAX: usize = 4096;

/// The length actually mapped for a buffer of `len` bytes: whole huge pages from 2 MiB on, else
/// whole 4 KiB pages. Buffers are reused by this length.
fn mapped_len(len: usize) -> Option<usize> {
    let unit = if len >= HUGE { HUGE } else { 4096 };
    len.checked_next_multiple_of(unit)
}

/// Freed mapped buffers `(mapped length, address)`, oldest first, and their total length.
struct Pool {
    free: Vec<(usize, usize)>,
    bytes: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    free: Vec::new(),
    bytes: 0,
});

fn pool() -> std::sync::MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `len` bytes of mapped memory (zeroed when `zero`), 64-byte aligned (2 MiB aligned from 2 MiB on, with
/// transparent huge pages requested), counted in the process heap counters like a global
/// allocation. `None` for small sizes or when mapping fails (the caller falls back to the global
/// allocator).
///
/// A buffer of the same mapped length freed earlier is reused (zeroed by `memset` when `zero`,
/// else left with its stale bytes for a caller that overwrites them all), like an
/// onnxruntime arena: first touch of fresh pages, which the kernel must zero and, in a VM, the host
/// must back, costs several times a user-space `memset`. Otherwise the memory is fresh anonymous
/// pages, zero already. Pooled buffers are not counted (they hold no tensor); at most [`POOL_MAX`]
/// bytes in at most [`POOL_BUFFERS_MAX`] buffers are pooled, the oldest unmapped first.
#[cfg(target_os = "linux")]
fn map_buf(len: usize, zero: bool) -> Option<NonNull<u8>> {
    if len < MAP_MIN {
        return None;
    }
    let mlen = mapped_len(len)?;
    let reused = {
        let mut p = pool();
        let hit = p.free.iter().rposition(|&(l, _)| l == mlen);
        hit.map(|i| {
            let (l, addr) = p.free.remove(i);
            p.bytes -= l;
            addr
        })
    };
    let start = match reused {
        Some(addr) => {
            if zero {
                // SAFETY: the pooled mapping `addr..addr + mlen` is owned by the pool alone (it
                // left it just above) and is readable and writable.
                unsafe { std::ptr::write_bytes(addr as *mut u8, 0, len) };
            }
            addr
        }
        None => map_fresh(mlen)?,
    };
    let now = HEAP_CURRENT.fetch_add(len as u64, Ordering::Relaxed) + len as u64;
    HEAP_PEAK.fetch_max(now, Ordering::Relaxed);
    NonNull::new(start as *mut u8)
}

/// A fresh anonymous mapping of `mlen` bytes (a multiple of pages, of huge pages from 2 MiB on,
/// then aligned to them); its address.
#[cfg(target_os = "linux")]
fn map_fresh(mlen: usize) -> Option<usize> {
    let huge = mlen >= HUGE;
    let total = mlen.checked_add(if huge { HUGE } else { 0 })?;
    // SAFETY: an anonymous private mapping with no address hint touches no existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            total,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let base = p as usize;
    if !huge {
        return Some(base);
    }
    // Keep the 2 MiB-aligned `start..start + mlen` and unmap the rest (all page multiples).
    let start = base.next_multiple_of(HUGE);
    // SAFETY: both cut ranges lie inside the mapping just made and nothing refers to them.
    unsafe {
        if start > base {
            libc::munmap(p, start - base);
        }
        if base + total > start + mlen {
            libc::munmap(
                (start + mlen) as *mut libc::c_void,
                base + total - start - mlen,
            );
        }
        libc::madvise(start as *mut libc::c_void, mlen, libc::MADV_HUGEPAGE);
    }
    Some(start)
}

#[cfg(not(target_os = "linux"))]
fn map_buf(_len: usize, _zero: bool) -> Option<NonNull<u8>> {
    None
}

/// Returns a buffer of [`map_buf`] to the pool, unmapping the oldest pooled buffers beyond
/// [`POOL_MAX`] bytes or [`POOL_BUFFERS_MAX`] buffers.
///
/// # Safety
/// `ptr` must come from `map_buf(len, _)` and not be used afterwards.
#[cfg(target_os = "linux")]
unsafe fn unmap(ptr: NonNull<u8>, len: usize) {
    HEAP_CURRENT.fetch_sub(len as u64, Ordering::Relaxed);
    let Some(mlen) = mapped_len(len) else { return };
    let mut evict = Vec::new();
    {
        let mut p = pool();
        p.free.push((mlen, ptr.as_ptr() as usize));
        p.bytes += mlen;
        while (p.bytes > POOL_MAX || p.free.len() > POOL_BUFFERS_MAX) && !p.free.is_empty() {
            let (l, addr) = p.free.remove(0);
            p.bytes -= l;
            evict.push((l, addr));
        }
    }
    for (l, addr) in evict {
        // SAFETY: a whole mapping of `map_fresh` that the pool owned alone and no longer lists.
        unsafe { libc::munmap(addr as *mut libc::c_void, l) };
    }
}

#[cfg(not(target_os = "linux"))]
unsafe fn unmap(_ptr: NonNull<u8>, _len: usize) {}

/// A scratch vector for kernels, charged to the run's stats while alive. In a planned run it is
/// taken from the node's planned scratch range when it fits (see [`crate::arena::Cursor`]).
pub fn scratch<T: bytemuck::Pod>(
    n: usize,
    stats: Option<&Arc<MemStats>>,
) -> Result<ScratchBuf<T>, AllocError> {
    let bytes = n
        .checked_mul(std::mem::size_of::<T>())
        .ok_or(AllocError(usize::MAX))?;
    let counted = stats.map(|s| {
        s.scratch_add(bytes as u64);
        (s.clone(), bytes as u64)
    });
    if let Some(s) = stats {
        let mut c = arena::lock(&s.cursor);
        if c.arena.is_some() {
            if let Some((arena, offset)) = c.take_scratch(bytes, std::mem::align_of::<T>()) {
                drop(c);
                // SAFETY: the range is the node's planned scratch (disjoint from every other live
                // buffer, module invariant of `arena`) minus the scratch still in use below it.
                unsafe { arena.range_mut(offset, bytes) }.fill(0);
                return Ok(ScratchBuf {
                    mem: ScratchMem::Arena {
                        arena,
                        offset,
                        len: bytes,
                        stats: s.clone(),
                    },
                    counted,
                    _t: std::marker::PhantomData,
                });
            }
        }
    }
    let mem = match Buf::zeroed(bytes, stats) {
        Ok(b) => ScratchMem::Heap(b),
        Err(e) => {
            if let Some((s, n)) = counted {
                s.scratch_sub(n);
            }
            return Err(e);
        }
    };
    Ok(ScratchBuf {
        mem,
        counted,
        _t: std::marker::PhantomData,
    })
}

#[derive(Debug)]
enum ScratchMem {
    Heap(Buf),
    /// `len` bytes at `offset` of a planned run's arena, given back to the cursor when dropped.
    Arena {
        arena: Arc<Arena>,
        offset: usize,
        len: usize,
        stats: Arc<MemStats>,
    },
}

/// Typed view of a scratch buffer.
#[derive(Debug)]
pub struct ScratchBuf<T> {
    mem: ScratchMem,
    /// The stats whose scratch count holds this buffer's bytes.
    counted: Option<(Arc<MemStats>, u64)>,
    _t: std::marker::PhantomData<T>,
}

impl<T> Drop for ScratchBuf<T> {
    fn drop(&mut self) {
        if let Some((s, n)) = &self.counted {
            s.scratch_sub(*n);
        }
    }
}

impl<T: bytemuck::Pod> ScratchBuf<T> {
    pub fn as_slice(&self) -> &[T] {
        match &self.mem {
            ScratchMem::Heap(b) => bytemuck::cast_slice(b.as_bytes()),
            // SAFETY: this scratch range belongs to this buffer alone while it lives (the cursor
            // hands it out once), and `&self` excludes a concurrent `as_mut_slice`.
            ScratchMem::Arena {
                arena, offset, len, ..
            } => bytemuck::cast_slice(unsafe { arena.range(*offset, *len) }),
        }
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        match &mut self.mem {
            ScratchMem::Heap(b) => bytemuck::cast_slice_mut(b.as_bytes_mut()),
            // SAFETY: as in `as_slice`; `&mut self` makes the access exclusive.
            ScratchMem::Arena {
                arena, offset, len, ..
            } => bytemuck::cast_slice_mut(unsafe { arena.range_mut(*offset, *len) }),
        }
    }
}

impl Drop for ScratchMem {
    fn drop(&mut self) {
        if let ScratchMem::Arena {
            offset, len, stats, ..
        } = self
        {
            arena::lock(&stats.cursor).release_scratch(*offset, *len);
        }
    }
}

/// A global allocator wrapper that counts the process heap: current and peak bytes, resettable.
/// Install it in a binary with `#[global_allocator] static A: CountingAlloc = CountingAlloc;`.
#[derive(Debug)]
pub struct CountingAlloc;

static HEAP_CURRENT: AtomicU64 = AtomicU64::new(0);
static HEAP_PEAK: AtomicU64 = AtomicU64::new(0);

/// Counts `bytes` more on the heap and raises the peak to match. The peak is read before it is
/// raised: most allocations do not raise it, and a plain load costs less than a locked update.
fn heap_grew(bytes: usize) {
    let now = HEAP_CURRENT.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
    if now > HEAP_PEAK.load(Ordering::Relaxed) {
        HEAP_PEAK.fetch_max(now, Ordering::Relaxed);
    }
}

// SAFETY: forwards to the system allocator unchanged; the counters do not affect allocation.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            heap_grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            heap_grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        HEAP_CURRENT.fetch_sub(layout.size() as u64, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                heap_grew(new_size - layout.size());
            } else {
                HEAP_CURRENT.fetch_sub((layout.size() - new_size) as u64, Ordering::Relaxed);
            }
        }
        p
    }
}

/// Process heap bytes now (0 unless [`CountingAlloc`] is the global allocator).
pub fn heap_current() -> u64 {
    HEAP_CURRENT.load(Ordering::Relaxed)
}

/// Process heap peak since the last [`reset_heap_peak`].
pub fn heap_peak() -> u64 {
    HEAP_PEAK.load(Ordering::Relaxed)
}

/// Resets the heap peak to the current value.
pub fn reset_heap_peak() {
    HEAP_PEAK.store(HEAP_CURRENT.load(Ordering::Relaxed), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_charge_and_credit_their_stats() {
        let s = MemStats::new();
        let a = Buf::zeroed(4 << 20, Some(&s)).unwrap();
        let b = Buf::zeroed(8 << 20, Some(&s)).unwrap();
        assert_eq!(s.current(), 12 << 20);
        drop(a);
        assert_eq!(s.current(), 8 << 20);
        let c = scratch::<f32>(1024, Some(&s)).unwrap();
        assert_eq!(c.as_slice().len(), 1024);
        assert_eq!(s.current(), (8 << 20) + 4096);
        drop((b, c));
        assert_eq!(s.current(), 0);
        assert_eq!(s.peak(), 12 << 20);
    }

    /// A tensor of a few hundred KiB freed by one node is the next node's of that size: no fresh
    /// pages to fault in, and zeroed again when asked.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_freed_buffer_is_reused_zeroed_by_the_next_of_its_size() {
        // A mapped length no other test allocates, so no other test takes it from the pool.
        let len = (300 << 10) + 123;
        assert!(len >= MAP_MIN);
        let mut a = Buf::zeroed(len, None).unwrap();
        assert!(a.mapped);
        a.as_bytes_mut().fill(9);
        let addr = a.as_ptr() as usize;
        drop(a);
        let b = Buf::zeroed(len, None).unwrap();
        assert_eq!(b.as_ptr() as usize, addr);
        assert!(b.as_bytes().iter().all(|&x| x == 0));
    }

    #[test]
    fn scratch_high_water_is_per_window() {
        let s = MemStats::new();
        let a = scratch::<f32>(100, Some(&s)).unwrap();
        let b = scratch::<f64>(10, Some(&s)).unwrap();
        drop(a);
        let c = scratch::<u8>(30, Some(&s)).unwrap();
        assert_eq!(s.take_scratch_high(), 480);
        // The next window starts from what is still held (b and c).
        drop(c);
        assert_eq!(s.take_scratch_high(), 110);
        drop(b);
        assert_eq!(s.take_scratch_high(), 80);
        assert_eq!(s.take_scratch_high(), 0);
    }

    #[test]
    fn buffers_are_aligned_and_zeroed() {
        let b = Buf::zeroed(1000, None).unwrap();
        assert_eq!(b.as_bytes().as_ptr() as usize % BUF_ALIGN, 0);
        assert!(b.as_bytes().iter().all(|&x| x == 0));
        assert!(Buf::zeroed(0, None).unwrap().is_empty());
        // Mapped sizes: just below and above the huge-page size, and not a whole number of pages.
        for len in [MAP_MIN, (2 << 20) - 4096, (2 << 20) + 1, (5 << 20) + 12345] {
            let mut b = Buf::zeroed(len, None).unwrap();
            assert_eq!(b.as_bytes().as_ptr() as usize % BUF_ALIGN, 0);
            assert!(b.as_bytes().iter().all(|&x| x == 0));
            b.as_bytes_mut().fill(7);
            assert_eq!(b.as_bytes()[len - 1], 7);
        }
    }
}
