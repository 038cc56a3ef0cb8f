#![allow(dead_code)]

pub mod app;
pub mod load;
pub mod pg;
pub mod server;
