"""What the image shows of itself: `vlmgrpo info`, `vlmgrpo selftest` (running vlmgrpo.checks) and `vlmgrpo lab`.
Imports serving and everything below it. The programs the image and imagegen call by module name stay at the top:
vlmgrpo.driver, vlmgrpo.environment and vlmgrpo.checks (the inventory program is the contract's: imagegen_contract)."""
