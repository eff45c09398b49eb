//! `liveness`: whether the server serves.

use crate::client::{Client, Response};
use crate::error::Error;
use serde::{Deserialize, Serialize};

/// `liveness`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Liveness {
    /// `OK` (keygate) or Unkey's message.
    pub message: String,
}

impl Client {
    /// `GET /v2/liveness`: needs no root key.
    pub async fn liveness(&self) -> Result<Response<Liveness>, Error> {
        self.get("liveness").await
    }
}
