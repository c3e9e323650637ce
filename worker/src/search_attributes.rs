//! baton's search attributes on the namespace, checked at start-up: a run upserting an
//! attribute the namespace lacks fails every workflow task (an SDK warning only), so a worker
//! that would wedge every run says what is missing and how to create it instead, and exits 2
//! (or creates them, with `register_search_attributes = true`, where the server allows it).

use std::{collections::HashMap, time::Duration};

use baton_workflows::workflow::SEARCH_ATTRIBUTE_DEFINITIONS;
use temporalio_client::{Client, NamespacedClient, grpc::OperatorService};
use temporalio_common::protos::temporal::api::{
    enums::v1::IndexedValueType,
    operatorservice::v1::{AddSearchAttributesRequest, ListSearchAttributesRequest},
};
use tracing::{info, warn};

/// How long the list and create calls may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// An attribute the namespace lacks, or has with another type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Missing {
    pub(crate) name: &'static str,
    /// baton's type (`Keyword`, `KeywordList`, ...).
    pub(crate) kind: &'static str,
    /// The namespace's type when it has the attribute with another one.
    pub(crate) found: Option<String>,
}

/// The attributes of [`SEARCH_ATTRIBUTE_DEFINITIONS`] that `custom` (name -> indexed value
/// type, as listed by the server) lacks or types differently.
pub(crate) fn missing(custom: &HashMap<String, i32>) -> Vec<Missing> {
    SEARCH_ATTRIBUTE_DEFINITIONS
        .iter()
        .filter_map(|&(name, kind)| {
            let wanted = indexed_type(kind);
            match custom.get(name) {
                Some(t) if Some(*t) == wanted.map(|w| w as i32) => None,
                Some(t) => Some(Missing {
                    name,
                    kind,
                    found: Some(type_name(*t)),
                }),
                None => Some(Missing {
                    name,
                    kind,
                    found: None,
                }),
            }
        })
        .collect()
}

/// The error a worker stops with: each attribute and the command that creates it.
pub(crate) fn explain(missing: &[Missing], namespace: &str) -> String {
    let mut lines = vec![format!(
        "namespace '{namespace}' lacks search attributes baton's runs set, so every run would \
         stop at its first workflow task; create them (once per namespace), or set \
         register_search_attributes = true (BATON_REGISTER_SEARCH_ATTRIBUTES=true) to let the \
         worker do it where the server allows:"
    )];
    for m in missing {
        match &m.found {
            None => lines.push(format!(
                "  temporal operator search-attribute create --namespace {namespace} --name {} --type {}",
                m.name, m.kind
            )),
            Some(found) => lines.push(format!(
                "  {} exists as {found}, baton needs {}: remove it (temporal operator \
                 search-attribute remove --namespace {namespace} --name {}) and create it \
                 with --type {}",
                m.name, m.kind, m.name, m.kind
            )),
        }
    }
    lines.join("\n")
}

/// What the start-up check found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Checked {
    /// Every attribute is there (or was just created).
    Complete,
    /// The server would not list them (e.g. an API key without operator rights): the worker
    /// goes on, warned.
    Unknown(String),
    /// Missing and not created: the worker must stop.
    Missing(String),
}

/// Lists the namespace's search attributes and compares them with baton's; creates the
/// missing ones when `register` (a type clash is never "fixed" by the worker).
pub(crate) async fn check(client: &Client, register: bool) -> Checked {
    let namespace = client.namespace();
    let mut operator = client.clone();
    let request = ListSearchAttributesRequest {
        namespace: namespace.clone(),
    };
    let listed = tokio::time::timeout(
        CALL_TIMEOUT,
        OperatorService::list_search_attributes(&mut operator, tonic::Request::new(request)),
    )
    .await;
    let custom = match listed {
        Ok(Ok(response)) => response.into_inner().custom_attributes,
        Ok(Err(status)) => {
            return Checked::Unknown(format!("{:?}: {}", status.code(), status.message()));
        }
        Err(_) => {
            return Checked::Unknown(format!("no answer within {} s", CALL_TIMEOUT.as_secs()));
        }
    };
    let missing = missing(&custom);
    if missing.is_empty() {
        return Checked::Complete;
    }
    let creatable: Vec<&Missing> = missing.iter().filter(|m| m.found.is_none()).collect();
    if !register || creatable.len() < missing.len() {
        return Checked::Missing(explain(&missing, &namespace));
    }
    let request = AddSearchAttributesRequest {
        namespace: namespace.clone(),
        search_attributes: creatable
            .iter()
            .filter_map(|m| indexed_type(m.kind).map(|t| (m.name.to_owned(), t as i32)))
            .collect(),
    };
    let added = tokio::time::timeout(
        CALL_TIMEOUT,
        OperatorService::add_search_attributes(&mut operator, tonic::Request::new(request)),
    )
    .await;
    match added {
        Ok(Ok(_)) => {
            let names: Vec<&str> = creatable.iter().map(|m| m.name).collect();
            info!(namespace, attributes = ?names, "created baton's search attributes");
            Checked::Complete
        }
        Ok(Err(status)) => {
            warn!(namespace, code = ?status.code(), message = status.message(), "could not create the search attributes");
            Checked::Missing(format!(
                "{}\n(register_search_attributes is on, but the server refused to create them: {:?}: {})",
                explain(&missing, &namespace),
                status.code(),
                status.message()
            ))
        }
        Err(_) => Checked::Missing(format!(
            "{}\n(register_search_attributes is on, but the server did not answer within {} s)",
            explain(&missing, &namespace),
            CALL_TIMEOUT.as_secs()
        )),
    }
}

/// The server's type for baton's type name.
fn indexed_type(kind: &str) -> Option<IndexedValueType> {
    Some(match kind {
        "Text" => IndexedValueType::Text,
        "Keyword" => IndexedValueType::Keyword,
        "Int" => IndexedValueType::Int,
        "Double" => IndexedValueType::Double,
        "Bool" => IndexedValueType::Bool,
        "Datetime" => IndexedValueType::Datetime,
        "KeywordList" => IndexedValueType::KeywordList,
        _ => return None,
    })
}

/// A server type as the `temporal` CLI writes it (`Keyword`, `KeywordList`, ...).
fn type_name(t: i32) -> String {
    IndexedValueType::try_from(t)
        .map(|t| {
            let name = t.as_str_name().trim_start_matches("INDEXED_VALUE_TYPE_");
            name.split('_')
                .map(|w| {
                    let mut c = w.chars();
                    match c.next() {
                        Some(f) => f
                            .to_uppercase()
                            .chain(c.flat_map(char::to_lowercase))
                            .collect(),
                        None => String::new(),
                    }
                })
                .collect::<String>()
        })
        .unwrap_or_else(|_| format!("type {t}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> HashMap<String, i32> {
        SEARCH_ATTRIBUTE_DEFINITIONS
            .iter()
            .map(|(n, k)| {
                (
                    (*n).to_owned(),
                    indexed_type(k).map(|t| t as i32).unwrap_or(0),
                )
            })
            .collect()
    }

    #[test]
    fn every_definition_has_a_server_type() {
        for (name, kind) in SEARCH_ATTRIBUTE_DEFINITIONS {
            assert!(indexed_type(kind).is_some(), "{name}: {kind}");
            assert_eq!(
                type_name(indexed_type(kind).unwrap_or_default() as i32),
                kind
            );
        }
    }

    #[test]
    fn a_missing_or_mistyped_attribute_is_named_with_the_command_that_fixes_it() {
        assert_eq!(missing(&all()), Vec::new());
        let mut custom = all();
        custom.remove("BatonLabels");
        custom.insert("BatonTurns".into(), IndexedValueType::Keyword as i32);
        let found = missing(&custom);
        assert_eq!(
            found,
            vec![
                Missing {
                    name: "BatonTurns",
                    kind: "Int",
                    found: Some("Keyword".into())
                },
                Missing {
                    name: "BatonLabels",
                    kind: "KeywordList",
                    found: None
                },
            ]
        );
        let text = explain(&found, "prod");
        assert!(
            text.contains(
                "temporal operator search-attribute create --namespace prod --name BatonLabels --type KeywordList"
            ),
            "{text}"
        );
        assert!(
            text.contains("BatonTurns exists as Keyword, baton needs Int"),
            "{text}"
        );
        assert!(text.contains("register_search_attributes = true"), "{text}");
    }
}
