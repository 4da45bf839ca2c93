"""What Dossier's HTTP apps (`dossier serve`, `dossier studio`) share: the front door."""
