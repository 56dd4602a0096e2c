//! Email templates: a subject, a plain-text body and an HTML body per kind,
//! with `{{name}}`-style placeholders. Built in (`templates/email/`), each
//! file overridable from `EMAIL_TEMPLATES_DIR`.

use std::path::Path;

use anyhow::Context;

use super::EmailKind;

/// The three parts of one email.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// One line; surrounding whitespace is trimmed.
    pub subject: String,
    /// The `text/plain` body.
    pub text: String,
    /// The `text/html` body; values are HTML-escaped into it.
    pub html: String,
}

/// One template per [`EmailKind`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Templates {
    /// For [`EmailKind::Welcome`].
    pub welcome: Template,
    /// For [`EmailKind::Downgrade`].
    pub downgrade: Template,
}

impl Default for Templates {
    /// The built-in templates.
    fn default() -> Self {
        Templates {
            welcome: Template {
                subject: include_str!("../../templates/email/welcome.subject").trim().into(),
                text: include_str!("../../templates/email/welcome.txt").into(),
                html: include_str!("../../templates/email/welcome.html").into(),
            },
            downgrade: Template {
                subject: include_str!("../../templates/email/downgrade.subject").trim().into(),
                text: include_str!("../../templates/email/downgrade.txt").into(),
                html: include_str!("../../templates/email/downgrade.html").into(),
            },
        }
    }
}

impl Templates {
    /// The built-in templates, with each file found in `dir`
    /// (`welcome.subject`, `welcome.txt`, `welcome.html`, `downgrade.*`)
    /// replacing its built-in counterpart.
    pub fn load(dir: Option<&Path>) -> anyhow::Result<Templates> {
        let mut templates = Templates::default();
        let Some(dir) = dir else {
            return Ok(templates);
        };
        for (kind, template) in [("welcome", &mut templates.welcome), ("downgrade", &mut templates.downgrade)]
        {
            for (extension, part) in [
                ("subject", &mut template.subject),
                ("txt", &mut template.text),
                ("html", &mut template.html),
            ] {
                let path = dir.join(format!("{kind}.{extension}"));
                match std::fs::read_to_string(&path) {
                    Ok(text) if extension == "subject" => *part = text.trim().to_string(),
                    Ok(text) => *part = text,
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                    Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
                }
            }
        }
        Ok(templates)
    }

    /// The template of `kind`.
    pub fn of(&self, kind: EmailKind) -> &Template {
        match kind {
            EmailKind::Welcome => &self.welcome,
            EmailKind::Downgrade => &self.downgrade,
        }
    }
}

impl Template {
    /// Subject, text and HTML with the placeholders replaced by `values`.
    pub fn render(&self, values: &[(&str, &str)]) -> Template {
        Template {
            // A value must not be able to add header lines.
            subject: fill(&self.subject, values, |v| v.replace(['\r', '\n'], " ")),
            text: fill(&self.text, values, str::to_string),
            html: fill(&self.html, values, escape_html),
        }
    }
}

/// Replaces each `{{key}}` by its value, passed through `encode`; unknown
/// placeholders stay as they are.
fn fill(template: &str, values: &[(&str, &str)], encode: impl Fn(&str) -> String) -> String {
    values.iter().fold(template.to_string(), |text, (key, value)| {
        text.replace(&format!("{{{{{key}}}}}"), &encode(value))
    })
}

fn escape_html(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_and_escaped_for_html_only() {
        let template = Template {
            subject: "Hi {{name}}".into(),
            text: "{{name}} <{{email}}> {{unknown}}".into(),
            html: "<p>{{name}}</p>".into(),
        };
        let rendered = template.render(&[("name", "Ada <b>&\nBob"), ("email", "ada@example.com")]);
        assert_eq!(rendered.subject, "Hi Ada <b>& Bob");
        assert_eq!(rendered.text, "Ada <b>&\nBob <ada@example.com> {{unknown}}");
        assert_eq!(rendered.html, "<p>Ada &lt;b&gt;&amp;\nBob</p>");
    }

    #[test]
    fn files_in_the_templates_dir_replace_the_built_in_ones() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("welcome.subject"), "  Hello {{name}}\n").unwrap();
        std::fs::write(dir.path().join("downgrade.html"), "<p>bye</p>").unwrap();
        let loaded = Templates::load(Some(dir.path())).unwrap();
        let built_in = Templates::default();
        assert_eq!(loaded.welcome.subject, "Hello {{name}}");
        assert_eq!(loaded.welcome.text, built_in.welcome.text);
        assert_eq!(loaded.downgrade.html, "<p>bye</p>");
        assert_eq!(loaded.downgrade.subject, built_in.downgrade.subject);
        assert_eq!(Templates::load(None).unwrap(), built_in);
    }
}
