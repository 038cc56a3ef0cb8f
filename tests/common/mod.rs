#![allow(dead_code)]

pub mod app;
pub mod binary;
pub mod pg;
