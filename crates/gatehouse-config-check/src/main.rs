//! `gatehouse-config-check`: the configuration a gateway is about to run with, parsed by the
//! worker's own code (`gatehouse_core::config::Config::from_lookup`, natively) before anything
//! starts or uploads (SPEC §26). `scripts/dev` and `scripts/deploy` run it; it prints the worker's
//! own message and exits 1 when the worker would refuse the configuration.
//!
//! ```text
//! gatehouse-config-check --config wrangler.toml [--dev-vars .dev.vars] [--var NAME:VALUE]…
//!                        [--secrets-elsewhere]
//! ```
//!
//! Values are looked up as wrangler gives them to the worker: `--var` over `.dev.vars` over the
//! `[vars]` of the config. `--secrets-elsewhere` (a deploy: the secrets live in Cloudflare, set by
//! `wrangler secret put`) stands in for each required secret not given and refuses a secret
//! written into `[vars]`, where it would be uploaded and shown as plain text.

use std::collections::BTreeMap;
use std::process::ExitCode;

use gatehouse_core::config::{Config, SECRETS};

/// The secrets without which the worker does not start; a deploy's check stands in for them.
const REQUIRED: [&str; 4] = ["KEY_PEPPER", "WEBHOOK_SECRETS_KEY", "ADMIN_TOKEN", "ORIGIN_SECRET"];

struct Arguments {
    config: String,
    dev_vars: Option<String>,
    vars: Vec<(String, String)>,
    secrets_elsewhere: bool,
}

fn arguments() -> Result<Arguments, String> {
    let mut args = std::env::args().skip(1);
    let mut parsed =
        Arguments { config: "wrangler.toml".into(), dev_vars: None, vars: vec![], secrets_elsewhere: false };
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--config" => parsed.config = value("--config")?,
            "--dev-vars" => parsed.dev_vars = Some(value("--dev-vars")?),
            "--var" => {
                let var = value("--var")?;
                let (name, v) = var.split_once(':').ok_or(format!("--var {var}: use NAME:VALUE"))?;
                parsed.vars.push((name.to_owned(), v.to_owned()));
            }
            "--secrets-elsewhere" => parsed.secrets_elsewhere = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(parsed)
}

/// The `[vars]` and the service bindings' names of a wrangler.toml. A var that is not a string
/// reaches the worker as its JSON text.
fn wrangler_toml(text: &str) -> Result<(BTreeMap<String, String>, Vec<String>), String> {
    let doc: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
    let vars = match doc.get("vars") {
        None => BTreeMap::new(),
        Some(toml::Value::Table(vars)) => vars
            .iter()
            .map(|(name, v)| {
                let text = match v {
                    toml::Value::String(s) => s.clone(),
                    other => serde_json::to_string(other).map_err(|e| e.to_string())?,
                };
                Ok((name.clone(), text))
            })
            .collect::<Result<_, String>>()?,
        Some(_) => return Err("[vars] is not a table".into()),
    };
    let services = doc
        .get("services")
        .and_then(toml::Value::as_array)
        .map(|list| list.iter().filter_map(|s| s.get("binding")?.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    Ok((vars, services))
}

/// `NAME=value` lines of a `.dev.vars` (dotenv: `#` comments, optional quotes around the value).
fn dev_vars(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| {
            let value = value.trim();
            let unquoted = ['"', '\'']
                .into_iter()
                .find_map(|q| value.strip_prefix(q).and_then(|v| v.strip_suffix(q)))
                .unwrap_or(value);
            (name.trim().to_owned(), unquoted.to_owned())
        })
        .collect()
}

/// What the worker would see, and the services it has; or why it cannot be read.
fn lookup(args: &Arguments) -> Result<(BTreeMap<String, String>, Vec<String>), String> {
    let text = std::fs::read_to_string(&args.config).map_err(|e| format!("{}: {e}", args.config))?;
    let (mut values, services) = wrangler_toml(&text).map_err(|e| format!("{}: {e}", args.config))?;
    if args.secrets_elsewhere {
        if let Some(name) = SECRETS.iter().find(|name| values.contains_key(**name)) {
            return Err(format!(
                "{name} is in the [vars] of {}: a secret there is uploaded and shown as plain text; \
                 remove it and set it with `wrangler secret put {name}`",
                args.config
            ));
        }
    }
    if let Some(path) = &args.dev_vars {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        values.extend(dev_vars(&text));
    }
    values.extend(args.vars.iter().cloned());
    if args.secrets_elsewhere {
        for name in REQUIRED {
            // Distinct and long enough: only what the vars themselves decide is checked.
            values
                .entry(name.to_owned())
                .or_insert_with(|| format!("stand-in for {name} (set in Cloudflare)"));
        }
    }
    Ok((values, services))
}

fn main() -> ExitCode {
    let checked = arguments().and_then(|args| {
        let (values, services) = lookup(&args)?;
        let config = Config::from_lookup(|name| values.get(name).cloned()).map_err(|e| e.to_string())?;
        config.check_services(|binding| services.iter().any(|s| s == binding)).map_err(|e| e.to_string())?;
        Ok((args, config))
    });
    match checked {
        Ok((args, config)) => {
            let plans: Vec<&str> = config.plans.keys().map(String::as_str).collect();
            println!(
                "configuration of {} is valid: plans {}; {} upstream route(s){}",
                args.config,
                plans.join(", "),
                config.upstreams.len(),
                if args.secrets_elsewhere { "; secrets are checked by the worker (GET /health)" } else { "" }
            );
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_vars_as_the_worker_gets_them() {
        let (vars, services) = wrangler_toml(
            "name = \"x\"\n[vars]\nPLANS = '{\"trial\":{}}'\nAUDIT_DATABASES = 2\n[[services]]\nbinding = \"BILLING\"\nservice = \"b\"\n",
        )
        .unwrap();
        assert_eq!(vars["PLANS"], r#"{"trial":{}}"#);
        assert_eq!(vars["AUDIT_DATABASES"], "2");
        assert_eq!(services, ["BILLING"]);
    }

    #[test]
    fn reads_dev_vars_like_dotenv() {
        let vars = dev_vars("# note\nKEY_PEPPER=\"abc=def\"\n\nADMIN_TOKEN='t'\nPLAIN = v \n");
        assert_eq!(vars["KEY_PEPPER"], "abc=def");
        assert_eq!(vars["ADMIN_TOKEN"], "t");
        assert_eq!(vars["PLAIN"], "v");
    }
}
