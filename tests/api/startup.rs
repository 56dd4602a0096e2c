//! Configuration that would weaken security refuses to start: the real
//! binary, one table. Each row names the setting and the reason, and the
//! value configured never appears in what the process prints.

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
