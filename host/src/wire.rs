//! The values a communicator moves and a field holds as raw bytes.
//!
//! At the bottom of the crate: fields ([`crate::field`]) hold them and communicators
//! ([`crate::comm`], [`crate::threads`], `crate::nccl`) move them, and neither should need the other
//! for that.

/// Values a communicator moves as raw bytes: plain numbers and arrays of them, with no padding and
/// every bit pattern a value ([`bytemuck::Pod`], which checks this where it is implemented).
pub trait Wire: bytemuck::Pod + Default + Send + Sync {}

impl<T: bytemuck::Pod + Default + Send + Sync> Wire for T {}
