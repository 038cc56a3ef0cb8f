#![allow(dead_code)]

pub mod app;
pub mod binary;
pub mod load;
pub mod pg;
pub mod server;
