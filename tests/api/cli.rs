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
        .output()
        .unwrap();
    let help = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success());
    assert!(help.contains("PADDLE_WEBHOOK_SECRET") && help.contains("SMTP_URL"), "{help}");
    for secret in
        ["pdl_secret_from_env", "c2VjcmV0ZnJvbWVudg", "db_password_from_env", "smtp_password_from_env"]
    {
        assert!(!help.contains(secret), "--help shows {secret}");
    }
}
