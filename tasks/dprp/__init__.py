"""Video-DPRP (paper 000, Nken et al.): differentially private random projection of each video."""
