pub mod keys;
pub mod overrides;
pub mod permissions;
pub mod ratelimit;
pub mod system;
