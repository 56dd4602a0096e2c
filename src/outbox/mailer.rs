//! SMTP: builds the message of an outbox row and hands it to the server.

use std::time::Duration;

use lettre::message::{Mailbox, MultiPart};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use secrecy::{ExposeSecret, SecretString};
use uuid::Uuid;

use super::{EmailKind, Templates, Values};

/// Why a [`Mailer`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum MailerError {
    /// `SMTP_URL` does not parse. The URL itself is not quoted: it may hold a password.
    #[error("SMTP_URL is not a valid smtp:// or smtps:// URL")]
    InvalidUrl,
    /// `SMTP_FROM` is not a mailbox.
    #[error("SMTP_FROM is not an address like `Acme <noreply@acme.example>`: {0}")]
    InvalidFrom(#[from] lettre::address::AddressError),
}

/// One email of the outbox, ready to be built into a message.
#[derive(Debug)]
pub struct OutgoingEmail<'a> {
    /// The outbox row; the Message-ID is derived from it.
    pub id: Uuid,
    /// Which template.
    pub kind: EmailKind,
    /// The recipient's address.
    pub to: &'a str,
    /// What the template shows.
    pub values: Values<'a>,
}

/// Sends outbox emails over SMTP.
pub struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    templates: Templates,
    timeout: Duration,
}

impl std::fmt::Debug for Mailer {
    /// Leaves the transport out: its configuration holds the credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailer")
            .field("from", &self.from)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Mailer {
    /// A mailer for `url` (`smtp://host:port`, `smtp://...?tls=required`
    /// for STARTTLS, `smtps://user:password@host:465`), sending as `from`
    /// (`Name <address>` or a bare address). `timeout` bounds a whole send,
    /// connection included.
    pub fn new(
        url: &SecretString,
        from: &str,
        templates: Templates,
        timeout: Duration,
    ) -> Result<Mailer, MailerError> {
        let from: Mailbox = from.parse()?;
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(url.expose_secret())
            .map_err(|_| MailerError::InvalidUrl)?
            .timeout(Some(timeout))
            .build();
        Ok(Mailer { transport, from, templates, timeout })
    }

    /// The longest a send may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The Message-ID of the email of outbox row `id`: the same on every
    /// attempt, so a copy sent again after a crash between the send and its
    /// record is recognisable downstream as the same message.
    pub fn message_id(&self, id: Uuid) -> String {
        format!("<{id}@{}>", self.from.email.domain())
    }

    /// Sends `email`; the error is a one-line description for `last_error`.
    pub async fn send(&self, email: &OutgoingEmail<'_>) -> Result<(), String> {
        let to: Mailbox = email.to.parse().map_err(|e| format!("invalid recipient address: {e}"))?;
        let rendered = self
            .templates
            .render(email.kind, &email.values)
            .map_err(|e| format!("cannot render the {} template: {e}", email.kind.as_str()))?;
        let message = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(rendered.subject)
            .message_id(Some(self.message_id(email.id)))
            .multipart(MultiPart::alternative_plain_html(rendered.text, rendered.html))
            .map_err(|e| format!("cannot build the message: {e}"))?;
        match tokio::time::timeout(self.timeout, self.transport.send(message)).await {
            Ok(Ok(_response)) => Ok(()),
            Ok(Err(error)) => Err(format!("SMTP: {error}")),
            Err(_) => Err(format!("SMTP: no answer within {} s", self.timeout.as_secs())),
        }
    }
}
