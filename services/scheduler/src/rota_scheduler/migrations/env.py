from rota.db.migrate import run_env

run_env()
