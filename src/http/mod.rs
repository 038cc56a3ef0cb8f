//! HTTP layer: routes, extractors, the one API error type.
// SKELETON: filled in by the HTTP work.

use std::sync::Arc;

use axum::Router;

use crate::config::Settings;
use crate::ledger::LedgerStore;

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn LedgerStore>,
    pub settings: Arc<Settings>,
}

pub fn router(state: AppState) -> Router {
    Router::new().with_state(state)
}
