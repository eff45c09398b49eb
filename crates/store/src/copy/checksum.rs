//! A table's checksum: the same on SQLite and PostgreSQL for the same rows, whatever order
//! they are read in. Each row is put in one form (a JSON array, booleans as 0 and 1, as
//! SQLite keeps them), hashed with SHA-256, and the row hashes are added up (four 64-bit
//! lanes, wrapping): a changed, missing or extra row changes the sum.

use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checksum {
    rows: u64,
    sum: [u64; 4],
}

impl Checksum {
    /// Adds one row, a JSON array as the copy reads it; `Err` when it is not a JSON
    /// array (a bug: the databases produce them).
    pub fn add(&mut self, row: &str) -> Result<(), String> {
        let value: serde_json::Value =
            serde_json::from_str(row).map_err(|e| format!("a row that is not JSON ({e})"))?;
        let serde_json::Value::Array(values) = value else {
            return Err("a row that is not an array".into());
        };
        let canonical: Vec<serde_json::Value> = values
            .into_iter()
            .map(|v| match v {
                serde_json::Value::Bool(b) => serde_json::Value::from(u8::from(b)),
                other => other,
            })
            .collect();
        let text = serde_json::Value::Array(canonical).to_string();
        let digest = Sha256::digest(text.as_bytes());
        for (lane, bytes) in self.sum.iter_mut().zip(digest.chunks_exact(8)) {
            let mut word = [0u8; 8];
            word.copy_from_slice(bytes);
            *lane = lane.wrapping_add(u64::from_be_bytes(word));
        }
        self.rows += 1;
        Ok(())
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The sum, as 64 hex digits.
    pub fn hex(&self) -> String {
        self.sum.iter().map(|lane| format!("{lane:016x}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(rows: &[&str]) -> Checksum {
        let mut c = Checksum::default();
        for r in rows {
            c.add(r).unwrap_or_else(|e| panic!("{r}: {e}"));
        }
        c
    }

    #[test]
    fn order_and_backend_forms_do_not_matter_content_does() {
        let a = of(&[r#"["k1",true,5,null]"#, r#"["k2",false,7,"x"]"#]);
        let b = of(&[r#"["k2",0,7,"x"]"#, r#"["k1", 1, 5, null]"#]);
        assert_eq!(a, b);
        assert_eq!(a.rows(), 2);
        assert_ne!(a, of(&[r#"["k1",true,5,null]"#, r#"["k2",false,8,"x"]"#]), "a changed value");
        assert_ne!(a, of(&[r#"["k1",true,5,null]"#]), "a missing row");
        assert_ne!(a, of(&[r#"["k1",true,5,null]"#, r#"["k2",false,7,"x"]"#, r#"["k3",0,0,null]"#]));
        assert_ne!(of(&[r#"["1"]"#]), of(&[r#"[1]"#]), "text is not a number");
        assert_eq!(a.hex().len(), 64);
        assert!(Checksum::default().add("{}").is_err());
    }
}
