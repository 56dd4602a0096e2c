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
            let provider = (spec.build)(secrets, tolerance_secs)
                .map_err(|source| ConfigError::InvalidSecret { variable: spec.secret_variable(), source })?;
            registry.0.insert(spec.name.to_string(), provider);
        }
        for (name, secrets) in config.standard_webhooks.by_name()? {
            let sender = StandardWebhooksSender::new(name, &secrets, tolerance_secs).map_err(|source| {
                ConfigError::InvalidSecret { variable: format!("STANDARD_WEBHOOKS ({name})"), source }
            })?;
            registry = registry.with(sender);
        }
        Ok(registry)
    }

    /// Enables `provider` under its name, replacing any provider of that name.
    pub fn with(mut self, provider: impl Provider + 'static) -> Self {
        self.0.insert(provider.name().to_string(), Arc::new(provider));
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
    use crate::config::SecretList;

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
        assert_eq!(error.to_string(), "invalid secret in CLERK_WEBHOOK_SECRET");
        let config = ProviderConfig {
            standard_webhooks: "acme=not base64!".parse().unwrap(),
            ..ProviderConfig::default()
        };
        let error = Registry::configure(&config, 300).unwrap_err();
        assert_eq!(error.to_string(), "invalid secret in STANDARD_WEBHOOKS (acme)");
    }
}
