//! The RedisFailover's `spec.engine`: which server its pods run. The maintained fork of the
//! spotahome redis-operator that Cozystack runs (freshworks-oss/redis-operator) takes `Redis` or
//! `Valkey` there, exactly so spelled, and refuses anything else; omitted means Redis, and
//! spotahome's own CRD has no such field. Both engines speak the same protocol, replicate the
//! same way and are read by the same redis_exporter, so chartgen, the scale adapter and the
//! scaler treat them alike (docs/redis.md); a value the operator would refuse is refused here too,
//! before anything is generated or written for it.

/// The field, as error messages name it.
pub const ENGINE_FIELD: &str = "spec.engine";
/// Its JSON pointer in the object.
pub const ENGINE_POINTER: &str = "/spec/engine";
/// The values the operator accepts.
pub const ENGINES: [&str; 2] = ["Redis", "Valkey"];

/// Checks an `engine` value that is set; a message naming the field and the accepted values
/// when the operator would refuse it.
pub fn check_engine(value: &str) -> Result<(), String> {
    if ENGINES.contains(&value) {
        return Ok(());
    }
    Err(format!(
        "{ENGINE_FIELD} {} is not an engine the redis-operator runs: {} (exactly so spelled), or \
         leave it out for Redis",
        crate::echo(value),
        ENGINES.join(" or ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_and_valkey_pass_anything_else_is_named() {
        assert_eq!(check_engine("Redis"), Ok(()));
        assert_eq!(check_engine("Valkey"), Ok(()));
        for bad in ["valkey", "KeyDB", "", "Valkey "] {
            let e = check_engine(bad).unwrap_err();
            assert!(
                e.starts_with("spec.engine \"") && e.contains("Redis or Valkey"),
                "{e}"
            );
        }
        // Hostile text is echoed escaped and cut, never raw.
        let e = check_engine(&format!("\u{1b}[2J{}", "x".repeat(500))).unwrap_err();
        assert!(!e.contains('\u{1b}') && e.len() < 300, "{e}");
    }
}
