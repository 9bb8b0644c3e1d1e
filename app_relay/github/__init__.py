"""The only code that talks to GitHub: vocabulary, client, auth, sign-in, protection."""
