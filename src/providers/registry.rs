//! The providers this process accepts deliveries from, by name.

use std::collections::HashMap;
use std::sync::Arc;

use super::config::ConfigError;
use super::standard_sender::StandardWebhooksSender;
use super::{BUILT_IN, Provider, ProviderConfig};

/// The enabled providers by name: the built-in ones with a secret, and every
/// Standard Webhooks sender. A built-in provider without a secret is absent,
/// and its routes answer 503; a name nobody configured answers 404.
#[derive(Debug, Default, Clone)]
pub struct Registry(HashMap<String, Arc<dyn Provider>>);

impl Registry {
    /// Builds every provider that has secrets in `config`, with the timestamp
    /// tolerance `tolerance_secs`, and logs the built-in ones that have none.
    pub fn configure(config: &ProviderConfig, tolerance_secs: u64) -> Result<Registry, ConfigError> {
        let mut registry = Registry::default();
        for spec in BUILT_IN {
            let secrets = config.secrets_of(spec.name);
            if secrets.is_empty() {
                let variable = spec.secret_variable();
                tracing::warn!(provider = spec.name, "{variable} is not set: its routes answer 503");
                continue;
            }
            let provider =
                spec.verifier(secrets, tolerance_secs).map_err(|invalid| ConfigError::InvalidSecret {
                    variable: spec.secret_variable(),
                    position: invalid.position,
                    problem: invalid.problem,
                })?;
            registry.0.insert(spec.name.to_string(), provider);
        }
        for (name, secrets) in config.standard_webhooks.by_name()? {
            let sender = StandardWebhooksSender::new(name, &secrets, tolerance_secs)
                .map_err(|invalid| config.standard_webhooks.invalid_secret(name, invalid))?;
            registry = registry.with(Arc::new(sender));
        }
        Ok(registry)
    }

    /// Enables `provider` under its name, replacing any provider of that name.
    pub fn with(mut self, provider: Arc<dyn Provider>) -> Self {
        self.0.insert(provider.name().to_string(), provider);
        self
    }

    /// The enabled provider called `name`: one hash lookup per request.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Provider>> {
        self.0.get(name)
    }

    /// Names of the enabled providers, sorted, for the startup log.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.0.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::SecretList;

    #[test]
    fn every_built_in_provider_is_built_under_its_own_name() {
        let mut config = ProviderConfig::default();
        for spec in BUILT_IN {
            config
                .secrets
                .insert(spec.name, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse::<SecretList>().unwrap());
        }
        config.standard_webhooks = "acme=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse().unwrap();
        let registry = Registry::configure(&config, 300).unwrap();
        for spec in BUILT_IN {
            assert_eq!(registry.get(spec.name).map(|p| p.name()), Some(spec.name));
        }
        assert_eq!(registry.get("acme").map(|p| p.name()), Some("acme"));
        assert_eq!(registry.names().len(), BUILT_IN.len() + 1);
    }

    #[test]
    fn providers_without_secrets_are_absent_and_bad_secrets_are_named_by_variable() {
        let registry = Registry::configure(&ProviderConfig::default(), 300).unwrap();
        assert!(registry.names().is_empty());

        let mut config = ProviderConfig::default();
        config
            .secrets
            .insert("clerk", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw,whsec_not base64!".parse().unwrap());
        let error = Registry::configure(&config, 300).unwrap_err();
        assert_eq!(
            error.to_string(),
            "CLERK_WEBHOOK_SECRET: secret #2 is not base64 after its whsec_ prefix"
        );
        let config = ProviderConfig {
            standard_webhooks: "acme=not base64!".parse().unwrap(),
            ..ProviderConfig::default()
        };
        let error = Registry::configure(&config, 300).unwrap_err();
        assert_eq!(
            error.to_string(),
            "STANDARD_WEBHOOKS entry #1 (acme=...) is not base64 after its whsec_ prefix"
        );
    }

    /// Configures only the built-in provider `name` with `value`, or only
    /// `STANDARD_WEBHOOKS`, and says why it is refused.
    fn refusal(name: &'static str, value: &str) -> Option<String> {
        let mut config = ProviderConfig::default();
        match name {
            "STANDARD_WEBHOOKS" => config.standard_webhooks = value.parse().unwrap(),
            _ => drop(config.secrets.insert(name, value.parse().unwrap())),
        }
        Registry::configure(&config, 300).err().map(|error| error.to_string())
    }

    #[test]
    fn an_empty_or_short_key_is_refused_naming_the_variable_and_position_never_the_value() {
        let short = "is shorter than 16 bytes once decoded";
        for (name, value, reason) in [
            // Zero-length HMAC keys, which verified requests signed with nothing.
            ("STANDARD_WEBHOOKS", "acme=", format!("STANDARD_WEBHOOKS entry #1 (acme=...) {short}")),
            ("STANDARD_WEBHOOKS", "acme=whsec_", format!("STANDARD_WEBHOOKS entry #1 (acme=...) {short}")),
            ("clerk", "whsec_", format!("CLERK_WEBHOOK_SECRET: secret #1 {short}")),
            // One character, and 15 bytes: guessable.
            ("paddle", "p", format!("PADDLE_WEBHOOK_SECRET: secret #1 {short}")),
            ("stripe", "whsec_012345678", format!("STRIPE_WEBHOOK_SECRET: secret #1 {short}")),
            ("github", "g", format!("GITHUB_WEBHOOK_SECRET: secret #1 {short}")),
            // Positions: the second secret of a rotation; the third entry of
            // the variable, though it is acme's second.
            ("paddle", "pdl_ntfset_0123456789,pdl", format!("PADDLE_WEBHOOK_SECRET: secret #2 {short}")),
            (
                "STANDARD_WEBHOOKS",
                "acme=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw,globex=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw,\
                 acme=whsec_c2hvcnQ=",
                format!("STANDARD_WEBHOOKS entry #3 (acme=...) {short}"),
            ),
        ] {
            assert_eq!(refusal(name, value).as_deref(), Some(reason.as_str()), "{name}={value}");
        }
        // 16 bytes once decoded is enough, in either encoding.
        assert_eq!(refusal("paddle", "0123456789abcdef"), None);
        assert_eq!(refusal("STANDARD_WEBHOOKS", "acme=whsec_MDEyMzQ1Njc4OWFiY2RlZg=="), None);
    }

    #[test]
    fn an_empty_variable_configures_nothing_for_every_kind_of_provider() {
        // As `.env.example` and docker-compose.yml leave a provider off.
        for name in ["paddle", "clerk", "stripe", "github", "STANDARD_WEBHOOKS"] {
            for empty in ["", " ", ",", " , "] {
                assert_eq!(refusal(name, empty), None, "{name}={empty:?}");
            }
        }
        let mut config = ProviderConfig::default();
        config.secrets.insert("clerk", "".parse().unwrap());
        config.standard_webhooks = " , ".parse().unwrap();
        assert!(Registry::configure(&config, 300).unwrap().names().is_empty());
    }
}
