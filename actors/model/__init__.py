"""The model side: the gateway (the only caller of the model), asking and validated answers,
prompt templates and their fitting to a context, rate limits and prices, the bundled local model
and the scripted model server. Knows events; nothing of the runtime, the roles or Ray."""
