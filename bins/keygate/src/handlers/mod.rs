pub mod keys;
pub mod permissions;
pub mod ratelimit;
pub mod system;
