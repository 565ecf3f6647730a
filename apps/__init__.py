"""Applications of SQM: PCA, logistic regression, PBM-VFL, HDP-VFL, datasets and the ``sqm`` command."""
