//! Configuration that would weaken security refuses to start: the real
//! binary, two tables (secrets; the embedded PostgreSQL's directory and
//! account). Each row names the setting and the reason; a secret never
//! appears in what the process prints, and a refused directory is left
//! exactly as it was.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

/// Runs `webhook-inbox serve` with nothing from the test's environment (nor a
/// developer's `.env`), a database that cannot be reached (a configuration
/// let through would fail there, later, with another message), and `env`.
fn serve(env: &[(&str, &str)]) -> Output {
    let cwd = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_webhook-inbox"))
        .arg("serve")
        .env_clear()
        .current_dir(cwd.path())
        .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/unreachable")
        .env("LISTEN_ADDR", "127.0.0.1:0")
        .env("RUST_BACKTRACE", "0")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// One row: a configuration, the reason it is refused, and text that must
/// not be printed (the secret, or a recognisable part of it).
struct Refusal {
    env: &'static [(&'static str, &'static str)],
    reason: &'static str,
    hidden: &'static str,
}

fn refusals() -> Vec<Refusal> {
    let refusal = |env, reason, hidden| Refusal { env, reason, hidden };
    vec![
        refusal(
            &[("STANDARD_WEBHOOKS", "acme=")],
            "STANDARD_WEBHOOKS entry #1 (acme=...) is shorter than 16 bytes once decoded",
            "",
        ),
        refusal(
            &[("STANDARD_WEBHOOKS", "acme=whsec_")],
            "STANDARD_WEBHOOKS entry #1 (acme=...) is shorter than 16 bytes once decoded",
            "whsec_",
        ),
        refusal(
            &[("STANDARD_WEBHOOKS", "acme=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw,acme=whsec_c2hvcnRrZXk=")],
            "STANDARD_WEBHOOKS entry #2 (acme=...) is shorter than 16 bytes once decoded",
            "c2hvcnRrZXk",
        ),
        refusal(
            &[("CLERK_WEBHOOK_SECRET", "whsec_")],
            "CLERK_WEBHOOK_SECRET: secret #1 is shorter than 16 bytes once decoded",
            "whsec_",
        ),
        refusal(
            &[("CLERK_WEBHOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw,whsec_bm90IGJhc2U2NCE!")],
            "CLERK_WEBHOOK_SECRET: secret #2 is not base64 after its whsec_ prefix",
            "bm90IGJhc2U2NCE",
        ),
        refusal(
            &[("PADDLE_WEBHOOK_SECRET", "k")],
            "PADDLE_WEBHOOK_SECRET: secret #1 is shorter than 16 bytes once decoded",
            "",
        ),
        refusal(
            &[("STRIPE_WEBHOOK_SECRET", "whsec_rolled_9fZqXk2Lr1,whsec_s3cr3t")],
            "STRIPE_WEBHOOK_SECRET: secret #2 is shorter than 16 bytes once decoded",
            "s3cr3t",
        ),
        refusal(
            &[("GITHUB_WEBHOOK_SECRET", "hunter2")],
            "GITHUB_WEBHOOK_SECRET: secret #1 is shorter than 16 bytes once decoded",
            "hunter2",
        ),
        refusal(
            &[("ADMIN_TOKEN", "short-token")],
            "ADMIN_TOKEN: a bearer token must be at least 16 bytes",
            "short-token",
        ),
        refusal(
            &[("ADMIN_TOKEN", "an-admin-token-long-enough ")],
            "ADMIN_TOKEN: a bearer token must not start or end with whitespace",
            "an-admin-token-long-enough",
        ),
        refusal(
            &[("METRICS_TOKEN", " a-metrics-token-long-enough")],
            "METRICS_TOKEN: a bearer token must not start or end with whitespace",
            "a-metrics-token-long-enough",
        ),
        // Traces are exported over OTLP/HTTP with protobuf only.
        refusal(
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ],
            "invalid value 'grpc' for '--otlp-protocol <OTLP_PROTOCOL>'\n  [possible values: http/protobuf]",
            "",
        ),
    ]
}

#[test]
fn empty_short_or_padded_secrets_refuse_to_start_naming_the_setting_never_the_value() {
    for case in refusals() {
        let output = serve(case.env);
        let printed =
            format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        let setting = case.env.iter().map(|(name, value)| format!("{name}={value:?}")).collect::<Vec<_>>();
        assert!(!output.status.success(), "{setting:?} started:\n{printed}");
        assert!(printed.contains(case.reason), "{setting:?}:\n{printed}");
        if !case.hidden.is_empty() {
            assert!(!printed.contains(case.hidden), "{setting:?} printed its value:\n{printed}");
        }
        // `STARTUP` lines are a table of RELIABILITY.md (scripts/reliability).
        println!("STARTUP\t{}\t{}", setting.join(" "), case.reason);
    }
}

#[test]
fn an_empty_variable_leaves_its_provider_off_as_if_it_were_unset() {
    // Every provider variable empty (as `.env.example` and docker-compose.yml
    // write an unused one): startup gets past the providers and stops at
    // the next thing wrong, the admin token.
    let output = serve(&[
        ("PADDLE_WEBHOOK_SECRET", ""),
        ("CLERK_WEBHOOK_SECRET", ""),
        ("STRIPE_WEBHOOK_SECRET", " "),
        ("GITHUB_WEBHOOK_SECRET", ","),
        ("STANDARD_WEBHOOKS", ""),
        ("ADMIN_TOKEN", "short"),
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    for variable in
        ["PADDLE_WEBHOOK_SECRET", "CLERK_WEBHOOK_SECRET", "STRIPE_WEBHOOK_SECRET", "GITHUB_WEBHOOK_SECRET"]
    {
        assert!(stderr.contains(&format!("{variable} is not set: its routes answer 503")), "{stderr}");
    }
    assert!(stderr.contains("ADMIN_TOKEN: a bearer token must be at least 16 bytes"), "{stderr}");
}

/// `webhook-inbox migrate` on the embedded cluster in `data_dir`, run from
/// `cwd` with `env`: it reaches the embedded PostgreSQL's start.
fn migrate_embedded(cwd: &Path, data_dir: &Path, env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_webhook-inbox"))
        .arg("migrate")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_BACKTRACE", "0")
        .env("DATA_DIR", data_dir)
        .current_dir(cwd)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// Owner, mode and entries of `path` itself (a symlink is not followed),
/// or `None` when there is nothing there.
fn snapshot(path: &Path) -> Option<(u32, u32, Vec<String>)> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    let mut entries: Vec<String> = match meta.is_dir() {
        true => {
            std::fs::read_dir(path).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect()
        }
        false => Vec::new(),
    };
    entries.sort();
    Some((meta.uid(), meta.mode() & 0o7777, entries))
}

/// One row: a data directory another account could have prepared or could
/// change, and the path that must be left exactly as it was.
struct DataDirCase {
    name: &'static str,
    /// Only root can arrange it (another account's files, or switching users).
    needs_root: bool,
    reason: &'static str,
}

#[test]
fn a_data_dir_another_account_could_have_prepared_is_refused_and_left_as_it_was() {
    let root = nix::unistd::geteuid().is_root();
    let account = |name| nix::unistd::User::from_name(name).unwrap().unwrap();
    let chown = |path: &Path, name| {
        let user = account(name);
        std::os::unix::fs::chown(path, Some(user.uid.as_raw()), Some(user.gid.as_raw())).unwrap()
    };
    let mode =
        |path: &Path, mode| std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    let cases = [
        DataDirCase {
            name: "DATA_DIR is a symlink to a directory of root's",
            needs_root: false,
            reason: "it is a symbolic link",
        },
        DataDirCase {
            name: "DATA_DIR=. in a directory holding other files",
            needs_root: false,
            reason: "it holds \"README.md\", which is not the embedded cluster's",
        },
        DataDirCase {
            name: "DATA_DIR writable by other accounts",
            needs_root: false,
            reason: "it is writable by other accounts",
        },
        DataDirCase {
            name: "DATA_DIR below a directory other accounts may write",
            needs_root: false,
            reason: "is writable by other accounts",
        },
        DataDirCase {
            name: "DATA_DIR owned by the server account (as earlier versions left it)",
            needs_root: true,
            reason: "it is owned by `postgres`, the server account",
        },
        DataDirCase {
            name: "DATA_DIR owned by nobody",
            needs_root: true,
            reason: "it is owned by `nobody`, not by this process's user",
        },
        DataDirCase {
            name: "DATA_DIR below a directory of the server account",
            needs_root: true,
            reason: "is owned by `postgres`",
        },
        DataDirCase {
            name: "EMBEDDED_PG_USER=nobody",
            needs_root: true,
            reason: "refusing to run the embedded PostgreSQL as `nobody`",
        },
        DataDirCase {
            name: "EMBEDDED_PG_USER names no account",
            needs_root: true,
            reason: "the account `no-such-account` to run it as does not exist",
        },
    ];
    for case in cases.iter().filter(|case| root || !case.needs_root) {
        let tmp = tempfile::tempdir().unwrap();
        mode(tmp.path(), 0o755);
        let (mut cwd, mut data_dir, mut env) = (tmp.path().to_path_buf(), tmp.path().join("data"), vec![]);
        // What must be left as it was: the directory the case is about.
        let mut kept = data_dir.clone();
        match case.name {
            "DATA_DIR is a symlink to a directory of root's" => {
                kept = tmp.path().join("victim");
                std::fs::create_dir(&kept).unwrap();
                mode(&kept, 0o700);
                std::fs::write(kept.join("keep"), "").unwrap();
                std::os::unix::fs::symlink(&kept, &data_dir).unwrap();
            }
            "DATA_DIR=. in a directory holding other files" => {
                (cwd, data_dir) = (tmp.path().join("project"), ".".into());
                kept = cwd.clone();
                std::fs::create_dir(&kept).unwrap();
                std::fs::write(kept.join("README.md"), "").unwrap();
            }
            "DATA_DIR writable by other accounts" => {
                std::fs::create_dir(&kept).unwrap();
                mode(&kept, 0o777);
            }
            "DATA_DIR below a directory other accounts may write" => {
                let shared = tmp.path().join("shared");
                std::fs::create_dir(&shared).unwrap();
                mode(&shared, 0o777);
                (data_dir, kept) = (shared.join("data"), shared);
            }
            "DATA_DIR owned by the server account (as earlier versions left it)"
            | "DATA_DIR owned by nobody" => {
                std::fs::create_dir(&kept).unwrap();
                mode(&kept, 0o700);
                chown(&kept, if case.name.ends_with("nobody") { "nobody" } else { "postgres" });
            }
            "DATA_DIR below a directory of the server account" => {
                let home = tmp.path().join("home");
                std::fs::create_dir(&home).unwrap();
                chown(&home, "postgres");
                (data_dir, kept) = (home.join("data"), home);
            }
            "EMBEDDED_PG_USER=nobody" => env.push(("EMBEDDED_PG_USER", "nobody")),
            _ => env.push(("EMBEDDED_PG_USER", "no-such-account")),
        }
        let before = snapshot(&kept);

        let output = migrate_embedded(&cwd, &data_dir, &env);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{}: started\n{stderr}", case.name);
        assert!(stderr.contains(case.reason), "{}:\n{stderr}", case.name);
        assert_eq!(snapshot(&kept), before, "{}: changed {}", case.name, kept.display());
        println!("STARTUP\t{}\t{}", case.name, case.reason);
    }
}

/// A destination's duration no timestamp can be offset by (issue 25: it
/// passed validation, then failed every send) stops `serve` naming its line.
#[test]
fn a_destination_duration_past_a_week_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    for (field, value, reason) in [
        ("retry_schedule", "[\"300000y\"]", "`retry_schedule`: \"300000y\" is not a duration up to 7d"),
        (
            "circuit_breaker",
            "{ cooldown = \"300000y\" }",
            "`circuit_breaker.cooldown`: is not a duration up to 7d",
        ),
    ] {
        let file = dir.path().join(format!("{field}.toml"));
        std::fs::write(
            &file,
            format!(
                "[[destinations]]\nname = \"app\"\nurl = \"http://127.0.0.1:9/\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nevents = [\"paddle:*\"]\n{field} = {value}\n"
            ),
        )
        .unwrap();
        let output = serve(&[
            ("CONFIG_FILE", file.to_str().unwrap()),
            ("PADDLE_WEBHOOK_SECRET", "pdl_ntfset_0123456789abcdef"),
        ]);
        let printed = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && printed.contains(reason), "{field}:\n{printed}");
        println!("STARTUP\ta destination's {field} = {value}\t{reason}");
    }
}
