//! The binary itself: flags, and what it never prints.

use std::process::Command;

#[test]
fn help_never_shows_a_configured_secret() {
    let output = Command::new(env!("CARGO_BIN_EXE_webhook-inbox"))
        .args(["serve", "--help"])
        .env("PADDLE_WEBHOOK_SECRET", "pdl_secret_from_env")
        .env("CLERK_WEBHOOK_SECRET", "whsec_c2VjcmV0ZnJvbWVudg==")
        .env("DATABASE_URL", "postgres://user:db_password_from_env@localhost/db")
        .env("SMTP_URL", "smtps://mailer:smtp_password_from_env@smtp.example.com")
        .env("ADMIN_TOKEN", "admin_token_from_env")
        .env("METRICS_TOKEN", "metrics_token_from_env")
        .output()
        .unwrap();
    let help = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success());
    assert!(help.contains("PADDLE_WEBHOOK_SECRET") && help.contains("ADMIN_TOKEN"), "{help}");
    for secret in [
        "pdl_secret_from_env",
        "c2VjcmV0ZnJvbWVudg",
        "db_password_from_env",
        "smtp_password_from_env",
        "admin_token_from_env",
        "metrics_token_from_env",
    ] {
        assert!(!help.contains(secret), "--help shows {secret}");
    }
}

#[test]
fn a_misconfigured_smtp_stops_startup_with_a_reason_and_without_the_password() {
    for (url, from, reason) in [
        ("smtp://mailer:smtp_password@127.0.0.1:2525", "", "SMTP_FROM is required when SMTP_URL is set"),
        ("smtp://mailer:smtp_password@127.0.0.1:2525", "not an address", "SMTP_FROM is not an address"),
        (
            "smpt:mailer:smtp_password",
            "noreply@acme.example",
            "SMTP_URL is not a valid smtp:// or smtps:// URL",
        ),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_webhook-inbox"))
            .args(["serve", "--listen-addr", "127.0.0.1:0"])
            .env("SMTP_URL", url)
            .env("SMTP_FROM", from)
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(!output.status.success());
        assert!(stderr.contains(reason), "{stderr}");
        assert!(!stderr.contains("smtp_password") && !stdout.contains("smtp_password"), "{stderr}{stdout}");
    }
}

#[test]
fn help_groups_each_subcommand_s_own_options_apart_from_the_database_s_and_names_every_provider() {
    let help = |args: &[&str]| {
        let output =
            Command::new(env!("CARGO_BIN_EXE_webhook-inbox")).args(args).arg("--help").output().unwrap();
        assert!(output.status.success());
        String::from_utf8(output.stdout).unwrap()
    };
    for (command, headings) in [
        (
            &["serve"][..],
            &[
                "HTTP:",
                "Providers:",
                "Effects:",
                "Operations:",
                "Console:",
                "Retention:",
                "Email (the outbox):",
            ][..],
        ),
        (&["events", "list"], &["Filters:"]),
        (&["events", "reprocess"], &["Filters:", "Effects:"]),
        (&["purge"], &[]),
    ] {
        let text = help(command);
        let (own, database) = text.split_once("Database (every subcommand):").expect("a database section");
        assert!(database.contains("--database-url") && database.contains("--lock-timeout-ms"), "{text}");
        assert!(!own.contains("--database-url"), "{text}");
        for heading in headings {
            assert!(own.contains(heading), "{command:?} has no {heading}: {text}");
        }
    }
    let list = help(&["events", "list"]);
    let provider = list.lines().skip_while(|line| !line.contains("--provider")).nth(1).unwrap_or_default();
    for spec in webhook_inbox::providers::BUILT_IN {
        assert!(provider.contains(spec.name), "--provider help misses {}: {provider}", spec.name);
    }
}
