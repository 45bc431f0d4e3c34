//! `slipstream config push` and `slipstream fleet`: the operator's side of a fleet, run against
//! etcd with the `[cluster]` section of an instance's own file.

use std::path::Path;

use super::etcd::Etcd;
use super::{config_key, effective};
use crate::config::cluster::ClusterSettings;

/// The `[cluster]` settings of an own file.
fn settings(local: &Path) -> Result<ClusterSettings, String> {
    let settings = crate::config::cluster::read_cluster(local).map_err(|e| e.to_string())?;
    settings.ok_or_else(|| {
        format!(
            "{}: no [cluster] section (etcd endpoints and prefix)",
            local.display()
        )
    })
}

/// Validates `file` over the own file `local` exactly as every instance will, then writes it to
/// the fleet's configuration key. Returns what to print.
pub fn push(local: &Path, file: &Path) -> Result<String, String> {
    let settings = settings(local)?;
    let text = super::read_file(file)?;
    let own = super::read_file(local)?;
    effective(&text, 0, &own, local, &settings)?;
    let mut etcd = Etcd::new(&settings);
    let key = config_key(&settings);
    let revision = etcd.put(&key, text.as_bytes(), 0)?;
    Ok(format!(
        "pushed {} to {key}: revision {revision}",
        file.display()
    ))
}

/// `slipstream check` on an own file: the shared configuration in etcd (else the copy kept on
/// disk) validated over it, as the instance would run it.
pub fn check(local: &Path) -> Result<String, String> {
    let settings = settings(local)?;
    let own = super::read_file(local)?;
    let key = config_key(&settings);
    let (text, revision, whence) = match Etcd::new(&settings).get(&key) {
        Ok((Some(kv), _)) => (kv.value, kv.mod_revision, format!("{key} in etcd")),
        Ok((None, _)) => {
            return Err(format!(
                "nothing under {key} in etcd yet: push a configuration first"
            ))
        }
        Err(e) => {
            let (text, revision) = super::kept(&settings).ok_or_else(|| {
                format!(
                    "etcd is unreachable ({e}) and nothing is kept in {}",
                    settings.state_dir.display()
                )
            })?;
            (
                text.into_bytes(),
                revision,
                format!(
                    "the copy kept in {} (etcd is unreachable: {e})",
                    settings.state_dir.display()
                ),
            )
        }
    };
    effective(
        &String::from_utf8_lossy(&text),
        revision,
        &own,
        local,
        &settings,
    )?;
    Ok(format!(
        "{}: ok over revision {revision} of {whence}",
        local.display()
    ))
}

/// The fleet's instances and what each serves, and any refusals, as a table or JSON.
pub fn fleet(local: &Path, json: bool) -> Result<String, String> {
    use std::fmt::Write;
    let settings = settings(local)?;
    let mut etcd = Etcd::new(&settings);
    let (current, _) = etcd.get(&config_key(&settings))?;
    let current = current.map_or(0, |kv| kv.mod_revision);
    let parse = |v: &[u8]| serde_json::from_slice::<serde_json::Value>(v).unwrap_or_default();
    let instances: Vec<_> = etcd
        .list(&format!("{}/instances/", settings.prefix))?
        .iter()
        .map(|kv| parse(&kv.value))
        .collect();
    let errors = etcd.list(&format!("{}/errors/", settings.prefix))?;
    if json {
        let errors: serde_json::Map<String, serde_json::Value> = errors
            .iter()
            .map(|kv| {
                (
                    String::from_utf8_lossy(&kv.key)
                        .rsplit('/')
                        .next()
                        .unwrap_or("")
                        .to_string(),
                    parse(&kv.value),
                )
            })
            .collect();
        let all = serde_json::json!({ "config_revision": current, "instances": instances, "errors": errors });
        return Ok(all.to_string());
    }
    let mut out = format!(
        "{} {}: configuration revision {current}, {} instances\n",
        settings.prefix,
        "fleet",
        instances.len()
    );
    let _ = writeln!(
        out,
        "{:<20} {:<24} {:<10} {:>10} {:>10} {:<8}",
        "NAME", "LISTEN", "VERSION", "REVISION", "GENERATION", "HEALTH"
    );
    for i in &instances {
        let listen = i["listen"]
            .as_array()
            .and_then(|l| l.first())
            .and_then(|a| a.as_str())
            .unwrap_or("-");
        let revision = i["revision"].as_i64().unwrap_or(0);
        let behind = if revision < current { " (behind)" } else { "" };
        let _ = writeln!(
            out,
            "{:<20} {:<24} {:<10} {:>10} {:>10} {}{behind}",
            i["name"].as_str().unwrap_or("?"),
            listen,
            i["version"].as_str().unwrap_or("?"),
            revision,
            i["generation"].as_u64().unwrap_or(0),
            i["health"].as_str().unwrap_or("?"),
        );
    }
    for kv in &errors {
        let e = parse(&kv.value);
        let name = String::from_utf8_lossy(&kv.key)
            .rsplit('/')
            .next()
            .unwrap_or("")
            .to_string();
        let _ = writeln!(
            out,
            "\n{name} refused revision {}:\n{}",
            e["revision"],
            e["errors"].as_str().unwrap_or("")
        );
    }
    Ok(out)
}
