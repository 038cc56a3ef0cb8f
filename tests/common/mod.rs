#![allow(dead_code)]

pub mod app;
pub mod pg;
