"""Upload and file formats, parsed safely: model bundles, language-model directories, data sets, traces, prompt
sets, tensor datatypes and signatures, and the limits on archives."""
