"""Take webhooks in: the web app, signature check, events and routers, the workers."""
