//! The binary itself: flags, and what it never prints.

use std::process::Command;

#[test]
fn help_never_shows_a_configured_secret() {
    // The top level describes the database options; serve, its own.
    for args in [&["--help"][..], &["serve", "--help"]] {
        help_shows_no_secret(args);
    }
}

fn help_shows_no_secret(args: &[&str]) {
    let output = Command::new(env!("CARGO_BIN_EXE_webhook-inbox"))
        .args(args)
        .env("PADDLE_WEBHOOK_SECRET", "pdl_secret_from_env")
        .env("CLERK_WEBHOOK_SECRET", "whsec_c2VjcmV0ZnJvbWVudg==")
        .env("DATABASE_URL", "postgres://user:db_password_from_env@localhost/db")
        .env("SMTP_URL", "smtps://mailer:smtp_password_from_env@smtp.example.com")
        .env("ADMIN_TOKEN", "admin_token_from_env")
        .env("METRICS_TOKEN", "metrics_token_from_env")
        .env("GITHUB_API_TOKEN", "ghp_token_from_env")
        .output()
        .unwrap();
    let help = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success());
    assert!(help.contains("DATABASE_URL"), "{help}");
    if args[0] == "serve" {
        assert!(help.contains("PADDLE_WEBHOOK_SECRET") && help.contains("ADMIN_TOKEN"), "{help}");
    }
    for secret in [
        "pdl_secret_from_env",
        "c2VjcmV0ZnJvbWVudg",
        "db_password_from_env",
        "smtp_password_from_env",
        "admin_token_from_env",
        "metrics_token_from_env",
        "ghp_token_from_env",
    ] {
        assert!(!help.contains(secret), "{args:?} shows {secret}");
    }
}

#[test]
fn reconciles_help_names_every_provider_read_from_an_api() {
    let output =
        Command::new(env!("CARGO_BIN_EXE_webhook-inbox")).args(["reconcile", "--help"]).output().unwrap();
    let help = String::from_utf8(output.stdout).unwrap();
    let line = help.lines().find(|line| line.contains("The provider:")).unwrap_or_else(|| panic!("{help}"));
    for provider in webhook_inbox::reconcile::PROVIDERS {
        assert!(line.contains(provider), "{provider} in {line}");
    }
    assert!(help.contains("GITHUB_HOOK_ID"), "{help}");
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

/// The help of `webhook-inbox <args> --help`.
fn help(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_webhook-inbox")).args(args).arg("--help").output().unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap()
}

/// The sections of a help text, by heading ("Options" for a subcommand's
/// own options without a heading of their own), in order.
fn sections(text: &str) -> Vec<(String, String)> {
    let mut sections: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        match line.strip_suffix(':').filter(|heading| !heading.starts_with(' ')) {
            Some(heading) => sections.push((heading.to_string(), String::new())),
            None => {
                if let Some((_, body)) = sections.last_mut() {
                    body.push_str(&format!("{line}\n"));
                }
            }
        }
    }
    sections
}

/// The global options: each one's `--flag`, and its variable.
fn global_options() -> Vec<(String, String)> {
    let mut cli = webhook_inbox::cli::command();
    cli.build();
    let global: Vec<(String, String)> = (cli.get_arguments())
        .filter(|arg| arg.is_global_set())
        .map(|arg| {
            let env = arg.get_env().map(|env| env.to_string_lossy().into_owned()).unwrap_or_default();
            (format!("--{}", arg.get_long().unwrap()), env)
        })
        .collect();
    assert!(
        global.iter().any(|(arg, _)| arg == "--database-url")
            && global.iter().any(|(arg, _)| arg == "--config")
    );
    global
}

#[test]
fn a_subcommand_s_help_shows_its_own_options_first_then_the_global_ones_once_a_line_each() {
    use webhook_inbox::cli::GLOBAL_SUMMARY;

    let global = global_options();
    let text = help(&["jobs", "replay"]);
    let sections = sections(&text);
    let headings: Vec<&str> = sections.iter().map(|(heading, _)| heading.as_str()).collect();
    assert_eq!(headings, ["Arguments", "Options", GLOBAL_SUMMARY], "{text}");
    let (_, own) = &sections[1];
    assert!(own.contains("--destination <DESTINATION>") && own.contains("--dry-run"), "{text}");
    // One line per global option, its flag and its variable; no description.
    let (_, summary) = &sections[2];
    let lines: Vec<Vec<&str>> = summary.lines().map(|line| line.split_whitespace().collect()).collect();
    let expected: Vec<Vec<String>> =
        global.iter().map(|(flag, env)| vec![flag.clone(), "[env:".into(), format!("{env}]")]).collect();
    assert_eq!(lines, expected, "{text}");
    // `-h` shows the same list.
    let short =
        Command::new(env!("CARGO_BIN_EXE_webhook-inbox")).args(["jobs", "replay", "-h"]).output().unwrap();
    assert!(String::from_utf8(short.stdout).unwrap().ends_with(&format!("{GLOBAL_SUMMARY}:\n{summary}")));
    // The top level describes each one in full.
    let top = help(&[]);
    assert!(
        top.contains("PostgreSQL URL. Unset: an embedded PostgreSQL")
            && top.contains("[default: .webhook-inbox]"),
        "{top}"
    );
    assert!(!text.contains("PostgreSQL URL") && !text.contains("[default: .webhook-inbox]"), "{text}");
}

#[test]
fn help_groups_each_subcommand_s_own_options_apart_from_the_global_ones_and_names_every_provider() {
    use webhook_inbox::cli::{GLOBAL, GLOBAL_SUMMARY};

    let global = global_options();
    // The top level shows every global option, in full, under its heading.
    let top = help(&[]);
    for (arg, env) in &global {
        let (heading, body) = (sections(&top).into_iter())
            .find(|(_, body)| body.contains(&format!("{arg} ")))
            .unwrap_or_else(|| panic!("--help lacks {arg}: {top}"));
        assert!(heading == GLOBAL || heading == "Database (every subcommand)", "{arg} is under {heading:?}");
        assert!(body.contains(&format!("[env: {env}")), "{arg}: {body}");
    }
    // Every subcommand, however deep, from the parser itself: a new one is checked too.
    let cli = webhook_inbox::cli::command();
    let mut commands: Vec<Vec<String>> = Vec::new();
    let mut pending: Vec<(Vec<String>, &clap::Command)> = vec![(Vec::new(), &cli)];
    while let Some((path, command)) = pending.pop() {
        for sub in command.get_subcommands().filter(|sub| sub.get_name() != "help") {
            let mut path = path.clone();
            path.push(sub.get_name().to_string());
            pending.push((path.clone(), sub));
            commands.push(path);
        }
    }
    assert!(commands.len() >= 10, "{commands:?}");
    for path in &commands {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let text = help(&args);
        let sections = sections(&text);
        // The global options once, last, a line each.
        let (last, summary) = sections.last().unwrap();
        assert_eq!(last, GLOBAL_SUMMARY, "{path:?}: {text}");
        assert_eq!(summary.lines().count(), global.len(), "{path:?}: {text}");
        for (arg, env) in &global {
            assert_eq!(
                text.matches(&format!("{arg} ")).count(),
                1,
                "{path:?} shows {arg} other than once: {text}"
            );
            let line = summary.lines().find(|line| line.contains(&format!("{arg} "))).unwrap();
            assert!(line.ends_with(&format!("[env: {env}]")), "{path:?}: {line}");
        }
        // A --provider help (on its line, or the next) names every built-in provider.
        let lines: Vec<&str> = text.lines().collect();
        if let Some(at) = lines.iter().position(|line| line.trim_start().starts_with("--provider ")) {
            let line = lines[at..lines.len().min(at + 2)].join(" ");
            for spec in webhook_inbox::providers::BUILT_IN {
                assert!(line.contains(spec.name), "{path:?} --provider help misses {}: {line}", spec.name);
            }
        }
    }
    for (command, headings) in [
        (
            &["serve"][..],
            &["HTTP", "Providers", "Effects", "Operations", "Console", "Retention", "Email (the outbox)"][..],
        ),
        (&["events", "list"], &["Filters"]),
        (&["events", "reprocess"], &["Filters", "Effects"]),
    ] {
        let text = help(command);
        let sections = sections(&text);
        for heading in headings {
            assert!(
                sections.iter().any(|(found, _)| found == heading),
                "{command:?} has no {heading}: {text}"
            );
        }
    }
}

#[test]
fn price_credits_help_says_an_unlisted_price_fails() {
    for command in [&["serve"][..], &["events", "reprocess"]] {
        let help = help(command);
        let at = help.find("--paddle-price-credits").unwrap_or_else(|| panic!("{command:?}: {help}"));
        let entry = &help[at..help[at..].find("[env").map_or(help.len(), |end| at + end)];
        assert!(entry.contains("not listed fails") && entry.contains("=0"), "{command:?}: {entry}");
    }
}

#[test]
fn the_pool_floor_is_the_workers_connections_and_the_reserved_ones() {
    use clap::Parser;
    use webhook_inbox::cli::Cli;
    use webhook_inbox::inbox::{MIN_POOL_SIZE, RECORDERS, RESERVED_CONNECTIONS};

    // One worker for deliveries with effects besides the recorders and the reserved connections.
    assert_eq!(MIN_POOL_SIZE, RESERVED_CONNECTIONS + RECORDERS + 1);
    let parse = |size: u32| {
        Cli::try_parse_from(["webhook-inbox", "--db-max-connections", &size.to_string(), "migrate"])
    };
    let refused = parse(MIN_POOL_SIZE - 1).unwrap_err().to_string();
    assert!(refused.contains(&format!("{MIN_POOL_SIZE}..")), "{refused}");
    assert!(parse(MIN_POOL_SIZE).is_ok());
    let help = help(&[]);
    assert!(help.contains(&format!("(at least {MIN_POOL_SIZE}): {RECORDERS} record")), "{help}");
}
