"""kubesim: an in-memory stand-in for kube-apiserver and the default scheduler, served over HTTP."""
