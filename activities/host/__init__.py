"""Host plumbing the activities stand on: processes (``proc``), git (``git``), files the
worker writes and files a sandbox wrote (``files``), heartbeats (``liveness``), the
attempt's artifact (``artifact``), the sandbox (``sandbox``), the model client
(``model_client``) and the model's tools (``toolbox``). Nothing here is an activity;
the activity classes in ``activities`` call these."""
