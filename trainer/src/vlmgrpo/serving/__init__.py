"""`vlmgrpo serve`: an OpenAI-compatible endpoint for a trained model, the checks of each request, and the app in
front of the engine. Imports evaluation, run and everything below them."""
