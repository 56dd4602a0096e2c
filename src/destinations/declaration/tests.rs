use super::*;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn parse(text: &str) -> Result<Declaration, String> {
    Declaration::parse(text, "destinations.toml", |name| (name == "APP_SECRET").then(|| SECRET.to_string()))
        .map_err(|e| e.to_string())
}

#[test]
fn a_full_declaration_is_read_with_its_defaults() {
    let declaration = parse(&format!(
        r#"
[[destinations]]
name = "billing-app"
url = "https://billing.example/hooks"
secret = "${{APP_SECRET}}"
events = ["paddle:subscription.*", "clerk:*"]

[[destinations]]
name = "audit"
url = "http://127.0.0.1:9000/in"
secret = ["{SECRET}", "${{APP_SECRET}}"]
events = ["stripe:invoice.paid"]
timeout = "2s"
retry_schedule = ["1s", "100ms"]
rate_limit = 5
ordering = "entity"
concurrency = 3
circuit_breaker = {{ failures = 2, cooldown = "30s" }}
"#
    ))
    .unwrap();
    let billing = declaration.get("billing-app").unwrap();
    assert_eq!(billing.url.as_str(), "https://billing.example/hooks");
    assert_eq!(billing.keys().len(), 1);
    assert!(billing.wants("paddle", "subscription.created") && billing.wants("clerk", "user.deleted"));
    assert!(!billing.wants("paddle", "transaction.completed"));
    assert_eq!(billing.timeout, Duration::from_secs(15));
    assert_eq!(billing.schedule.attempts(), 8, "Svix's: at once, then 7 retries");
    assert_eq!(billing.schedule.delays()[1], Duration::from_secs(300));
    assert_eq!((billing.rate_limit, billing.ordering, billing.concurrency), (None, Ordering::None, 10));
    assert_eq!(billing.circuit, Circuit { failures: 10, cooldown: Duration::from_secs(60) });

    let audit = declaration.get("audit").unwrap();
    assert_eq!(audit.keys().len(), 2);
    assert_eq!(audit.timeout, Duration::from_secs(2));
    assert_eq!(audit.schedule.delays(), [Duration::from_secs(1), Duration::from_millis(100)]);
    assert_eq!((audit.rate_limit, audit.ordering, audit.concurrency), (Some(5.0), Ordering::Entity, 3));
    assert_eq!(audit.circuit, Circuit { failures: 2, cooldown: Duration::from_secs(30) });
    assert_eq!(declaration.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["billing-app", "audit"]);
    assert!(!format!("{billing:?}").contains("MfKQ"), "keys are never printed");
}

#[test]
fn an_empty_file_declares_nothing() {
    assert!(parse("").unwrap().is_empty());
    assert!(parse("destinations = []").unwrap().is_empty());
}

#[test]
fn each_mistake_is_named_by_line_and_field_without_the_secret() {
    let destination = |line: &str| {
        format!(
            "# destinations\n[[destinations]]\nname = \"app\"\nurl = \"https://app.example/\"\nsecret = \"{SECRET}\"\nevents = [\"paddle:*\"]\n{line}\n"
        )
    };
    let cases = [
        ("timeout = \"soon\"", "line 7: destination \"app\", `timeout`: must be a duration"),
        ("timeout = \"10m\"", "line 7: destination \"app\", `timeout`: must be a duration from 10ms to 5m"),
        (
            "retry_schedule = [\"5s\", \"later\"]",
            "line 7: destination \"app\", `retry_schedule`: \"later\" is not a duration up to 7d",
        ),
        (
            "retry_schedule = [\"5s\", \"300000y\"]",
            "line 7: destination \"app\", `retry_schedule`: \"300000y\" is not a duration up to 7d",
        ),
        (
            "retry_schedule = [\"8d\"]",
            "line 7: destination \"app\", `retry_schedule`: \"8d\" is not a duration up to 7d",
        ),
        (
            "circuit_breaker = { cooldown = \"300000y\" }",
            "line 7: destination \"app\", `circuit_breaker.cooldown`: is not a duration up to 7d",
        ),
        (
            "rate_limit = 0",
            "line 7: destination \"app\", `rate_limit`: must be a number of requests per second",
        ),
        (
            "ordering = \"strict\"",
            "line 7: destination \"app\", `ordering`: must be \"none\", \"entity\" or \"key\"",
        ),
        (
            "ordering_key = { paddle = \"/data/customer_id\" }",
            "line 7: destination \"app\", `ordering_key`: is read only with ordering = \"key\"",
        ),
        (
            "ordering = \"key\"\nordering_key = { paddle = \"data.customer_id\" }",
            "line 8: destination \"app\", `ordering_key.paddle`: \"data.customer_id\" is not a JSON pointer",
        ),
        (
            "ordering = \"key\"\nordering_key = { paddle = \"/data/a~2\" }",
            "line 8: destination \"app\", `ordering_key.paddle`: \"/data/a~2\" has a `~` that is not",
        ),
        ("concurrency = 0", "line 7: destination \"app\", `concurrency`: must be from 1 to 1000"),
        ("urll = \"x\"", "line 7: unknown field `urll`"),
        (
            "circuit_breaker = { failures = 0 }",
            "line 7: destination \"app\", `circuit_breaker.failures`: must be at least 1",
        ),
    ];
    for (line, expected) in cases {
        let error = parse(&destination(line)).unwrap_err();
        assert!(error.starts_with("destinations.toml, ") && error.contains(expected), "{line}: {error}");
    }

    let replace = |from: &str, to: &str| parse(&destination("").replace(from, to)).unwrap_err();
    assert!(
        replace("name = \"app\"", "name = \"App!\"")
            .contains("line 3: destination \"App!\", `name`: must be 1 to 64")
    );
    assert!(
        replace("https://app.example/", "ftp://app.example/")
            .contains("line 4: destination \"app\", `url`: is not an http")
    );
    assert!(
        replace("\"paddle:*\"", "\"paddle\"")
            .contains("line 6: destination \"app\", `events`: \"paddle\" is not an event pattern")
    );
    assert!(
        replace("[\"paddle:*\"]", "[]").contains("line 6: destination \"app\", `events`: names no event")
    );
    assert!(replace("url = \"https://app.example/\"\n", "").contains("line 2: missing field `url`"));

    let short = replace(SECRET, "whsec_c2hvcnQ=");
    assert!(
        short.contains("line 5: destination \"app\", `secret`: is shorter than 16 bytes once decoded"),
        "{short}"
    );
    let unset = replace(SECRET, "${NOT_SET}");
    assert!(
        unset.contains("line 5: destination \"app\", `secret`: names ${NOT_SET}, which is not set"),
        "{unset}"
    );
    let second = replace(&format!("\"{SECRET}\""), &format!("[\"{SECRET}\", \"whsec_\"]"));
    assert!(second.contains("`secret`: #2 is shorter than 16 bytes"), "{second}");
    for error in [short, unset, second] {
        assert!(!error.contains("MfKQ") && !error.contains("c2hvcnQ"), "a secret in {error}");
    }

    let twice = parse(&format!("{}{}", destination(""), destination("").replace("# destinations\n", "")));
    assert!(twice.unwrap_err().contains("line 9: destination \"app\", `name`: is declared twice"));
}

#[test]
fn patterns_must_name_providers_that_are_configured() {
    let declaration = parse(&format!(
        "[[destinations]]\nname = \"app\"\nurl = \"http://x.example\"\nsecret = \"{SECRET}\"\nevents = [\"padle:*\"]\n"
    ))
    .unwrap();
    let error = declaration.check_providers(&["paddle", "clerk"]).unwrap_err().to_string();
    assert!(error.contains("\"padle\", which is not configured here"), "{error}");
    assert!(declaration.check_providers(&["padle"]).is_ok());
}

#[test]
fn an_ordering_key_is_read_per_provider_over_the_defaults() {
    let declaration = parse(&format!(
        "[[destinations]]\nname = \"app\"\nurl = \"http://x.example\"\nsecret = \"{SECRET}\"\nevents = [\"paddle:*\"]\n\
         ordering = \"key\"\nordering_key = {{ clerk = \"/data/id\", paddle = \"/data/subscription_id\" }}\n\n\
         [[destinations]]\nname = \"defaults\"\nurl = \"http://x.example\"\nsecret = \"{SECRET}\"\n\
         events = [\"paddle:*\"]\nordering = \"key\"\n"
    ))
    .unwrap();
    let data = serde_json::json!({ "id": "txn_1", "customer_id": "ctm_1", "subscription_id": "sub_1" });
    let key = |name: &str, provider: &str| {
        let destination = declaration.get(name).unwrap();
        assert_eq!(destination.ordering, Ordering::Key);
        destination.ordering_key.as_ref().unwrap().key(provider, &data)
    };
    assert_eq!(key("app", "paddle").as_deref(), Some("paddle:sub_1"));
    assert_eq!(key("app", "clerk").as_deref(), Some("clerk:txn_1"));
    assert_eq!(key("defaults", "paddle").as_deref(), Some("paddle:ctm_1"));

    let error = declaration.check_providers(&["paddle"]).unwrap_err().to_string();
    assert!(
        error.contains("`ordering_key` names the provider \"clerk\", which is not configured"),
        "{error}"
    );
    assert!(declaration.check_providers(&["paddle", "clerk"]).is_ok(), "the defaults' Stripe is not checked");
}
