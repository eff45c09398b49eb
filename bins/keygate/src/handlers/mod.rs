pub mod keys;
pub mod ratelimit;
pub mod system;
