mod fixture;
mod fuzz;
