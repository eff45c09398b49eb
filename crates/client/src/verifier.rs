//! The verifier: one way to verify a key whichever back end answers it, a keygate server
//! over HTTP ([`Verifier::remote`]) or keygate in this process ([`Verifier::embedded`]).

use crate::client::Client;
use crate::error::Error;
use crate::keys::{VerifyKeyRequest, VerifyKeyResult};

/// Verifies keys through the back end chosen at construction; both answer the same
/// [`VerifyKeyResult`] for the same key and request. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Verifier {
    backend: Backend,
}

#[derive(Debug, Clone)]
enum Backend {
    Remote(Client),
    #[cfg(feature = "embedded")]
    Embedded(crate::embedded::Embedded),
}

impl Verifier {
    /// Verification by a keygate server (or Unkey) through `client`, whose root key needs
    /// `api.*.verify_key` (or `api.<apiId>.verify_key`).
    pub fn remote(client: Client) -> Self {
        Self { backend: Backend::Remote(client) }
    }

    /// Verification in this process, on the server's database.
    #[cfg(feature = "embedded")]
    #[cfg_attr(docsrs, doc(cfg(feature = "embedded")))]
    pub fn embedded(embedded: crate::embedded::Embedded) -> Self {
        Self { backend: Backend::Embedded(embedded) }
    }

    /// The embedded back end, when it is this one.
    #[cfg(feature = "embedded")]
    pub(crate) fn as_embedded(&self) -> Option<&crate::embedded::Embedded> {
        match &self.backend {
            Backend::Embedded(embedded) => Some(embedded),
            Backend::Remote(_) => None,
        }
    }

    /// `keys.verifyKey`: every outcome of the key is `Ok` (read `code`); `Err` means no
    /// answer (keygate unreachable, its store down, a request it refuses).
    pub async fn verify(&self, req: &VerifyKeyRequest) -> Result<VerifyKeyResult, Error> {
        match &self.backend {
            Backend::Remote(client) => Ok(client.verify_key(req).await?.into_data()),
            #[cfg(feature = "embedded")]
            Backend::Embedded(embedded) => embedded.verify(req).await,
        }
    }
}
