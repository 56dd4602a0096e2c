//! Email templates: a subject, a plain-text body and an HTML body per kind,
//! rendered with minijinja (Jinja syntax: `{{ name }}`). Built in
//! (`templates/email/`), each file overridable from `EMAIL_TEMPLATES_DIR`.
//!
//! Why a template engine rather than string replacement: it reads the
//! template once, so a value is never read as a placeholder (a first name
//! of `{{email}}` is sent as that text, not as the address), and it
//! HTML-escapes every value written into an `.html` template.

use std::path::Path;

use anyhow::Context;
use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, UndefinedBehavior, context};

use super::EmailKind;

/// The parts of an email, by file extension.
const PARTS: [&str; 3] = ["subject", "txt", "html"];

/// What an email's templates may show; every template gets every value.
#[derive(Debug, Clone, Copy)]
pub struct Values<'a> {
    /// The first name, else the address.
    pub name: &'a str,
    /// The first name, possibly empty.
    pub first_name: &'a str,
    /// The last name, possibly empty.
    pub last_name: &'a str,
    /// The recipient's address.
    pub email: &'a str,
    /// The subscription the email is about, possibly empty.
    pub subscription_id: &'a str,
}

impl Values<'_> {
    /// Values that render every placeholder, to check templates at load.
    const SAMPLE: Values<'static> = Values {
        name: "Ada",
        first_name: "Ada",
        last_name: "Lovelace",
        email: "ada@example.com",
        subscription_id: "sub_01",
    };
}

/// One email, rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// One line, surrounding whitespace trimmed.
    pub subject: String,
    /// The `text/plain` body.
    pub text: String,
    /// The `text/html` body.
    pub html: String,
}

/// The templates of every [`EmailKind`], parsed and checked.
#[derive(Debug)]
pub struct Templates {
    env: Environment<'static>,
}

impl Default for Templates {
    /// The built-in templates.
    fn default() -> Self {
        Templates::load(None).expect("the built-in templates render")
    }
}

impl Templates {
    /// The built-in templates, with each file found in `dir`
    /// (`welcome.subject`, `welcome.txt`, `welcome.html`, `downgrade.*`)
    /// replacing its built-in counterpart. A template that does not parse,
    /// or names a value there is none of (`{{ frist_name }}`), is refused
    /// here, at startup, rather than when its first email is sent.
    pub fn load(dir: Option<&Path>) -> anyhow::Result<Templates> {
        let mut env = Environment::new();
        // Bodies end with the newline their files end with, as written.
        env.set_syntax(SyntaxConfig::builder().keep_trailing_newline(true).build()?);
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        // The default auto-escaping: HTML for `*.html`, nothing for the others.
        for kind in [EmailKind::Welcome, EmailKind::Downgrade] {
            for part in PARTS {
                let name = format!("{}.{part}", kind.as_str());
                let overridden = match dir {
                    Some(dir) => read_if_present(&dir.join(&name))?,
                    None => None,
                };
                let source = overridden.unwrap_or_else(|| built_in(kind, part).to_string());
                env.add_template_owned(name.clone(), source)
                    .with_context(|| format!("email template {name}"))?;
            }
        }
        let templates = Templates { env };
        for kind in [EmailKind::Welcome, EmailKind::Downgrade] {
            templates
                .render(kind, &Values::SAMPLE)
                .with_context(|| format!("email templates {}.*", kind.as_str()))?;
        }
        Ok(templates)
    }

    /// The email of `kind` with `values` in it.
    pub fn render(&self, kind: EmailKind, values: &Values<'_>) -> Result<Rendered, minijinja::Error> {
        let Values { name, first_name, last_name, email, subscription_id } = *values;
        let context = context! { name, first_name, last_name, email, subscription_id };
        let part = |part: &str| self.env.get_template(&format!("{}.{part}", kind.as_str()))?.render(&context);
        Ok(Rendered {
            // A value must not be able to add header lines.
            subject: part("subject")?.replace(['\r', '\n'], " ").trim().to_string(),
            text: part("txt")?,
            html: part("html")?,
        })
    }
}

/// The text of `path`, or `None` when there is no such file.
fn read_if_present(path: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error).with_context(|| format!("reading {}", path.display())),
    }
}

/// The built-in template of `kind`'s `part`.
fn built_in(kind: EmailKind, part: &str) -> &'static str {
    match (kind, part) {
        (EmailKind::Welcome, "subject") => include_str!("../../templates/email/welcome.subject"),
        (EmailKind::Welcome, "txt") => include_str!("../../templates/email/welcome.txt"),
        (EmailKind::Welcome, _) => include_str!("../../templates/email/welcome.html"),
        (EmailKind::Downgrade, "subject") => include_str!("../../templates/email/downgrade.subject"),
        (EmailKind::Downgrade, "txt") => include_str!("../../templates/email/downgrade.txt"),
        (EmailKind::Downgrade, _) => include_str!("../../templates/email/downgrade.html"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values<'a>(first_name: &'a str, email: &'a str) -> Values<'a> {
        Values { name: first_name, first_name, last_name: "", email, subscription_id: "sub_9" }
    }

    fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn values_are_escaped_for_html_only_and_cannot_break_the_subject_line() {
        let welcome = Templates::default()
            .render(EmailKind::Welcome, &values("Ada <b>&\r\nBob", "ada@example.com"))
            .unwrap();
        assert_eq!(welcome.subject, "Welcome, Ada <b>&  Bob");
        assert!(welcome.text.starts_with("Hello Ada <b>&\r\nBob,\n"), "{}", welcome.text);
        assert!(welcome.html.contains("<p>Hello Ada &lt;b&gt;&amp;\r\nBob,</p>"), "{}", welcome.html);
        // The files' own text, trailing newline included, is kept as written.
        assert!(welcome.text.ends_with("you can ignore this email.\n"), "{:?}", welcome.text);
    }

    #[test]
    fn a_placeholder_inside_a_value_stays_literal_text() {
        let templates = Templates::default();
        for first_name in ["{{email}}", "{{ subscription_id }}", "{% if true %}x{% endif %}", "{# c #}"] {
            let welcome =
                templates.render(EmailKind::Welcome, &values(first_name, "ada@example.com")).unwrap();
            assert_eq!(welcome.subject, format!("Welcome, {first_name}"));
            assert!(welcome.text.starts_with(&format!("Hello {first_name},")), "{}", welcome.text);
            let downgrade = templates.render(EmailKind::Downgrade, &values(first_name, "a@b.c")).unwrap();
            assert!(downgrade.text.starts_with(&format!("Hello {first_name},")), "{}", downgrade.text);
            assert!(!downgrade.text.contains("Hello sub_9") && !welcome.text.contains("Hello ada@"));
        }
    }

    #[test]
    fn files_in_the_templates_dir_replace_the_built_in_ones() {
        let dir = dir_with(&[
            ("welcome.subject", "  Hello {{name}}\n"),
            ("downgrade.html", "<p>bye {{ name }} ({{subscription_id}})</p>"),
        ]);
        let loaded = Templates::load(Some(dir.path())).unwrap();
        let built_in = Templates::default();
        let ada = values("Ada", "ada@example.com");
        let (welcome, default_welcome) = (
            loaded.render(EmailKind::Welcome, &ada).unwrap(),
            built_in.render(EmailKind::Welcome, &ada).unwrap(),
        );
        assert_eq!(welcome.subject, "Hello Ada");
        assert_eq!(welcome.text, default_welcome.text);
        let (downgrade, default_downgrade) = (
            loaded.render(EmailKind::Downgrade, &ada).unwrap(),
            built_in.render(EmailKind::Downgrade, &ada).unwrap(),
        );
        assert_eq!(downgrade.html, "<p>bye Ada (sub_9)</p>");
        assert_eq!(downgrade.subject, default_downgrade.subject);
    }

    #[test]
    fn an_override_with_an_unknown_placeholder_or_bad_syntax_stops_startup() {
        for (file, text, reason) in [
            ("welcome.txt", "Hello {{ frist_name }}", "email templates welcome.*"),
            ("downgrade.subject", "Bye {{ name", "email template downgrade.subject"),
        ] {
            let dir = dir_with(&[(file, text)]);
            let error = format!("{:#}", Templates::load(Some(dir.path())).unwrap_err());
            assert!(error.starts_with(reason), "{error}");
        }
    }
}
