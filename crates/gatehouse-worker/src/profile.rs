//! The profile build's allocation count (cargo feature `profile`, built by `scripts/profile`
//! only): every allocation of the isolate's wasm — the worker's requests and its Durable Objects
//! alike — is counted, and each answer's `Server-Timing` carries the running totals as
//! `wasm-alloc;desc="<allocations> <bytes>"`. `scripts/profile` reads them before and after a
//! scenario and divides by its requests. Never in a deployed build.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

fn count(size: usize) {
    ALLOCATIONS.fetch_add(1, Relaxed);
    BYTES.fetch_add(size as u64, Relaxed);
}

// SAFETY: every call is passed to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    /// A growth counts as an allocation of the new size (it may move and copy).
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// The `Server-Timing` entry with the totals so far.
pub fn server_timing() -> String {
    format!(r#"wasm-alloc;desc="{} {}""#, ALLOCATIONS.load(Relaxed), BYTES.load(Relaxed))
}
