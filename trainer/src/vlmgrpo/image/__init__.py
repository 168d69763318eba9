"""The image's own side: `vlmgrpo info`, `vlmgrpo selftest` (running the in-image checks, checks/) and `vlmgrpo lab`,
and the programs the image's entrypoint runs by module name before anything heavy imports: the driver check (driver)
and a writable HOME for any uid (environment), both standard library and the contract only. Imports serving and
everything below it. What imagegen reads of an image (the inventory program, the check runner) is the contract's:
imagegen_contract."""
