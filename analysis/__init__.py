"""Analysis of replay studies: closed-form theory, MLflow data, fits, plots and reports."""
