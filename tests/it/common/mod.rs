#![allow(dead_code)]

#[macro_use]
pub mod app;
pub mod load;
pub mod oidc;
pub mod pg;
pub mod server;
